"""HP301-HP302: numeric constants that only fit fp32.

- HP301: a fill/mask constant beyond the fp16 range (``masked_fill(m, -1e9)``,
  ``(1 - mask) * -1e9``). In fp16 it overflows to -inf (then 0 * inf = NaN) or raises
  "value cannot be converted to type Half without overflow". Fix:
  ``torch.finfo(x.dtype).min`` -- *unsafe*: masked scores change from -1e9 to -3.4e38 in
  fp32 (softmax gives the same result), so it needs ``--unsafe-fixes``.
- HP302: ``torch.finfo(torch.float32)`` in forward, where the tensor's own dtype was meant;
  fix ``torch.finfo(x.dtype)`` (safe when x's dtype is known to be floating).
"""

from __future__ import annotations

import ast

from halfprec import ops
from halfprec.leaks.lint.casts import is_fp32_dtype, span
from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.findings import EXPR, Fix
from halfprec.leaks.lint.nodes import walk

FP16_MAX = 65504.0
"""``torch.finfo(torch.float16).max``, written out: lint reads source and never imports torch."""


def _literal(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return None if isinstance(node.value, bool) else float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal(node.operand)
        if inner is None:
            return None
        return -inner if isinstance(node.op, ast.USub) else inner
    return None


def _out_of_range(node: ast.AST) -> float | None:
    value = _literal(node)
    if value is None or value != value or abs(value) == float("inf"):
        return None
    return value if abs(value) > FP16_MAX else None


def _explicit_fp32(node: ast.AST | None, ctx: Context) -> bool:
    """``m.float()`` or ``torch.zeros_like(k, dtype=torch.float32)``: a tensor made fp32 on
    purpose, where a large constant fits (the upcast itself is HP201/HP202's finding)."""
    for sub in walk(node) if node is not None else ():
        if not isinstance(sub, ast.Call):
            continue
        if isinstance(sub.func, ast.Attribute) and sub.func.attr in ("float", "double"):
            return True
        if any(k.arg == "dtype" and is_fp32_dtype(k.value, ctx) for k in sub.keywords):
            return True
    return False


def _name(node: ast.AST | None) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _names_fp16(test: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr in ("float16", "half") for n in ast.walk(test)
    )


def _not_fp16_here(node: ast.AST, ctx: Context) -> bool:
    """Whether ``node`` runs only where a dtype test said "not float16": the ``else`` of
    ``if m.dtype == torch.float16:`` (or the body of ``!=``). There the constant meets fp32
    or bf16, whose range holds it."""
    parents = ctx.parents
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            test = parent.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and _names_fp16(test):
                negated = isinstance(test.ops[0], (ast.NotEq, ast.IsNot))
                in_body = (
                    child is parent.body
                    if isinstance(parent, ast.IfExp)
                    else any(child is b for b in parent.body)
                )
                if in_body == negated:
                    return True
        child, parent = parent, parents.get(id(parent))
    return False


def _report(value_node: ast.AST, value: float, owner: str | None, ctx: Context) -> None:
    if _not_fp16_here(value_node, ctx):
        return
    owner = owner or ctx.template
    bound = "min" if value < 0 else "max"
    fix = None
    if owner is not None and ctx.torch_name is not None:
        fix = Fix(EXPR, *span(value_node, ctx), f"{ctx.torch_name}.finfo({owner}.dtype).{bound}")
    use = f"`torch.finfo({owner or 'x'}.dtype).{bound}`"
    ctx.report(
        value_node,
        "HP301",
        f"{value:g} is beyond the fp16 range (max {FP16_MAX:g}): it becomes inf or raises in "
        f"half; use {use}",
        fix,
    )


def check_constants(node: ast.AST, ctx: Context) -> None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub)):
        for this, other in ((node.left, node.right), (node.right, node.left)):
            value = _out_of_range(this)
            if value is not None and _literal(other) is None and not _explicit_fp32(other, ctx):
                owner = _name(other) if _name(other) in ctx.floating else None
                _report(this, value, owner, ctx)
        return
    if not isinstance(node, ast.Call):
        return
    func = node.func
    if ctx.is_torch_attr(func, "finfo") is not None:
        arg = node.args[0] if node.args else None
        if arg is None or is_fp32_dtype(arg, ctx):
            template = ctx.template
            fix = None
            if arg and template:
                fix = Fix(EXPR, *span(arg, ctx), f"{template}.dtype", unsafe=not ctx.template_known)
            ctx.report(
                node,
                "HP302",
                "`torch.finfo` of fp32 in forward gives fp32 limits in a half model; use "
                f"`torch.finfo({template or 'x'}.dtype)`",
                fix,
            )
        return
    name = func.attr if isinstance(func, ast.Attribute) else None
    if name is None or not ops.is_fill(name):
        return
    receiver = func.value if isinstance(func, ast.Attribute) else None
    if _explicit_fp32(receiver, ctx):
        return
    is_torch = receiver is not None and _name(receiver) in ctx.imports.torch
    owner = None if is_torch else _name(receiver)
    if is_torch and name == "where" and len(node.args) > 1:
        owner = _name(node.args[1])
    for arg in [*node.args, *(k.value for k in node.keywords)]:
        value = _out_of_range(arg)
        if value is not None:
            _report(arg, value, owner, ctx)
