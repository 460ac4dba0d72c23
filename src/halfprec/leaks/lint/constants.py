"""HP301-HP302: numeric constants that only fit fp32.

- HP301: a fill/mask constant beyond the fp16 range (``masked_fill(m, -1e9)``,
  ``(1 - mask) * -1e9``). In fp16 it overflows to -inf (then 0 * inf = NaN) or raises
  "value cannot be converted to type Half without overflow". Fix:
  ``torch.finfo(x.dtype).min`` -- *unsafe*: masked scores change from -1e9 to -3.4e38 in
  fp32 (softmax gives the same result), so it needs ``--unsafe-fixes``.
- HP302: ``torch.finfo(torch.float32)`` in forward, where the tensor's own dtype was meant;
  fix ``torch.finfo(x.dtype)`` (safe when x's dtype is known to be floating). Not where
  every value the limit meets is fp32/fp64 or integer by its own code (:mod:`.nothalf`),
  nor where the limit read is a number fp16 and bf16 both hold (:mod:`.limits`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from halfprec import ops
from halfprec.leaks.lint.asked import asked_fp32
from halfprec.leaks.lint.casts import is_fp32_dtype, span
from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.fate import fate_of
from halfprec.leaks.lint.findings import EXPR, Fix
from halfprec.leaks.lint.landing import lands_in_half
from halfprec.leaks.lint.limits import held_in_half
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.nothalf import meets_no_half
from halfprec.leaks.lint.receivers import template_at
from halfprec.leaks.lint.values import value_of

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
    purpose, where a large constant fits (the upcast itself is HP201/HP202's finding), or a
    value computed from fp32 the library asks for (``scores`` of ``scores * total`` where
    ``total`` reads ``p * mask.float()``)."""
    for sub in walk(node) if node is not None else ():
        if not isinstance(sub, ast.Call):
            continue
        if isinstance(sub.func, ast.Attribute) and sub.func.attr in ("float", "double"):
            return True
        if any(k.arg == "dtype" and is_fp32_dtype(k.value, ctx) for k in sub.keywords):
            return True
    return node is not None and asked_fp32(node, ctx.at(node))  # see .asked and .kept


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


def _maybe_half(node: ast.AST, ctx: Context) -> bool:
    """Whether ``node`` is a floating tensor of the model's dtype where it is used, computes
    with an input of the function whose dtype the caller decides (``(1 - mask) * -1e9``:
    masks handed between modules are in the model's dtype), or is a name that the function
    tests against float16 (``if p_mask.dtype == torch.float16``): then the constant is
    written in that dtype. A value computed here that the lint cannot judge (an integer
    mask from a helper) is followed instead (:func:`_follow`)."""
    if value_of(node, ctx) is not None or _of_an_input(node, ctx):
        return True
    if not isinstance(node, ast.Name) or ctx.function is None:
        return False
    for sub in walk(ctx.function):
        if isinstance(sub, ast.Compare) and _names_fp16(sub):
            left = sub.left
            if (
                isinstance(left, ast.Attribute)
                and left.attr == "dtype"
                and _name(left.value) == node.id
            ):
                return True
    return False


_NOT_FLOAT_TYPES = ("LongTensor", "BoolTensor", "IntTensor", "ByteTensor", "int", "bool")


def _of_an_input(node: ast.AST, ctx: Context) -> bool:
    """``mask``, ``1.0 - mask[:, None]``, ``mask.unsqueeze(1)``: arithmetic, indexing or a
    method of an input of the function not bound again before ``node``, and not annotated
    as integers."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        parts = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.operand]
        return any(_of_an_input(p, ctx) for p in parts)
    if isinstance(node, ast.Subscript):
        return _of_an_input(node.value, ctx)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        keeps = node.func.attr in ("unsqueeze", "view", "reshape", "transpose", "expand")
        return keeps and _of_an_input(node.func.value, ctx)
    if not isinstance(node, ast.Name) or ctx.binding_before(node) is not None:
        return False
    a = fn.args
    param = next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == node.id), None)
    if param is None or param.arg in ("self", "cls"):
        return False
    return not dotted(param.annotation).endswith(_NOT_FLOAT_TYPES) if param.annotation else True


def _dtype_of(call: ast.Call, ctx: Context) -> bool | None:
    """A fill's ``dtype=``: True when it may be half (``x.dtype``, ``torch.float16``), False
    for fp32, None when not given (or not known)."""
    for k in call.keywords:
        if k.arg == "dtype":
            if is_fp32_dtype(k.value, ctx):
                return False
            text = dotted(k.value)
            last = text.rsplit(".", 1)[-1]
            known = last in ("dtype", "float16", "half", "bfloat16") or last.endswith("_dtype")
            return True if known else None
    return None


def _carrier(call: ast.Call, name: str, ctx: Context) -> ast.AST | None:
    """The tensor whose dtype the constant of ``torch.<name>(...)`` is written in: the
    input of ``full_like``/``masked_fill``/``clamp``..., the other branch of ``where``; None
    for ``full``/``tensor`` (fp32 by default) and a ``where`` of two numbers."""
    args = call.args
    if name == "where":
        branches = [
            *args[1:3],
            *(k.value for k in call.keywords if k.arg in ("input", "other", "self")),
        ]
        tensors = [b for b in branches if _literal(b) is None and not isinstance(b, ast.Constant)]
        return tensors[0] if tensors else None
    if name in ("full", "tensor"):
        return None
    if args:
        return args[0]
    return next((k.value for k in call.keywords if k.arg == "input"), None)


def _report(
    value_node: ast.AST,
    value: float,
    owner: str | None,
    ctx: Context,
    lands: Callable[[], bool] | None = None,
) -> None:
    """Report ``value_node``; with ``lands``, only if it says (once the function is
    walked) that the constant's tensor lands in half."""
    if _not_fp16_here(value_node, ctx):
        return
    owner = owner or template_at(value_node, ctx)
    bound = "min" if value < 0 else "max"
    fix = None
    if owner is not None and ctx.torch_name is not None:
        fix = Fix(EXPR, *span(value_node, ctx), f"{ctx.torch_name}.finfo({owner}.dtype).{bound}")
    use = f"`torch.finfo({owner or 'x'}.dtype).{bound}`"
    message = (
        f"{value:g} is beyond the fp16 range (max {FP16_MAX:g}): it becomes inf or raises in "
        f"half; use {use}"
    )
    if lands is None:
        ctx.report(value_node, "HP301", message, fix)
        return

    def decide() -> None:
        if lands():
            ctx.report(value_node, "HP301", message, fix)

    ctx.deferred.append(decide)


def _follow(made: ast.AST, ctx: Context, factory: bool = False) -> Callable[[], bool]:
    """Whether the tensor made at ``made`` (fp32 or of an unknown dtype) lands in half
    (:mod:`.landing`); for an fp32 factory (``torch.full(n, -1e9)``) also whether HP101
    reports it, as its fix (``x.new_full``) writes the constant in half."""

    def lands() -> bool:
        if factory and fate_of(made, ctx).leaks:
            return True
        return lands_in_half(made, ctx)

    return lands


def _binop(node: ast.BinOp, ctx: Context) -> None:
    for this, other in ((node.left, node.right), (node.right, node.left)):
        value = _out_of_range(this)
        if value is None or _literal(other) is not None or _explicit_fp32(other, ctx):
            continue
        owner = _name(other) if _name(other) in ctx.floating else None
        if _maybe_half(other, ctx):
            _report(this, value, owner, ctx)
        else:  # (1 - mask) * -1e9 of an integer mask: fp32 unless it lands in half
            _report(this, value, owner, ctx, _follow(node, ctx))


def check_constants(node: ast.AST, ctx: Context) -> None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub)):
        _binop(node, ctx)
        return
    if not isinstance(node, ast.Call):
        return
    func = node.func
    if ctx.is_torch_attr(func, "finfo") is not None:
        _finfo(node, ctx)
        return
    name = func.attr if isinstance(func, ast.Attribute) else None
    if name is None or not ops.is_fill(name):
        return
    receiver = func.value if isinstance(func, ast.Attribute) else None
    if _explicit_fp32(receiver, ctx):
        return
    is_torch = receiver is not None and _name(receiver) in ctx.imports.torch
    carrier = _carrier(node, name, ctx) if is_torch else receiver
    owner = _name(carrier) if carrier is not None and _name(carrier) in ctx.floating else None
    if not is_torch:
        owner = _name(receiver)
    dtype = _dtype_of(node, ctx)
    if dtype is False or carrier is not None and _explicit_fp32(carrier, ctx):
        return
    for arg in [*node.args, *(k.value for k in node.keywords)]:
        value = _out_of_range(arg)
        if value is None:
            continue
        if dtype or (dtype is None and carrier is not None and _maybe_half(carrier, ctx)):
            _report(arg, value, owner, ctx)
        else:
            _report(arg, value, owner, ctx, _follow(node, ctx, factory=ops.is_factory(name)))


def _finfo(node: ast.Call, ctx: Context) -> None:
    arg = node.args[0] if node.args else None
    if arg is not None and held_in_half(node, arg, ctx):
        return  # torch.finfo(torch.float32).eps: 2**-23, a value fp16 and bf16 hold
    if (arg is None or is_fp32_dtype(arg, ctx)) and not meets_no_half(node, ctx):
        template = template_at(node, ctx)
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
