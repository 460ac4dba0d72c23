"""HP201-HP203: hard-coded fp32 in forward.

- HP201 ``.float()``, ``.double()``, ``.to(torch.float32)``, ``.type(torch.FloatTensor)``:
  the result leaves the model's dtype. Often deliberate (softmax or a norm in fp32), so there
  is no automatic fix: use ``.to(x.dtype)``, or keep it and suppress the line.
- HP202 ``dtype=torch.float32`` passed to a call in forward.
- HP203 ``torch.get_default_dtype()`` in forward: the default dtype stays fp32 in a half
  model; fix ``x.dtype`` (safe when x's dtype is known to be floating).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.findings import EXPR, Fix
from halfprec.leaks.lint.receivers import template_at

FP32_NAMES = frozenset({"float32", "float", "float64", "double"})
_FP32_TYPES = frozenset({"FloatTensor", "DoubleTensor"})


def is_fp32_dtype(node: ast.AST, ctx: Context) -> bool:
    """``torch.float32`` (or ``float``, ``float64``, ``double``, ``torch.FloatTensor``)."""
    if ctx.is_torch_attr(node, *FP32_NAMES, *_FP32_TYPES) is not None:
        return True
    name = dotted(node)
    return name.split(".")[0] in ctx.imports.torch and name.endswith(".cuda.FloatTensor")


def span(node: ast.AST, ctx: Context) -> tuple[tuple[int, int], tuple[int, int]]:
    """Start and end of ``node`` as (1-based line, character column)."""
    line = getattr(node, "lineno", 1)
    end_line = getattr(node, "end_lineno", None) or line
    return (
        (line, ctx.char_col(line, getattr(node, "col_offset", 0))),
        (end_line, ctx.char_col(end_line, getattr(node, "end_col_offset", None) or 0)),
    )


def _upcast_method(call: ast.Call, ctx: Context) -> str | None:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr in ("float", "double") and not call.args and not call.keywords:
        return f".{func.attr}()"
    if func.attr in ("to", "type"):
        values = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
        for v in values:
            if is_fp32_dtype(v, ctx):
                return f".{func.attr}({dotted(v)})"
    return None


def _of_a_factory(call: ast.Call, ctx: Context) -> bool:
    func = call.func
    inner = func.value if isinstance(func, ast.Attribute) else None
    return (
        isinstance(inner, ast.Call)
        and ctx.is_torch_attr(inner.func, "arange") is not None
        and not any(k.arg == "dtype" for k in inner.keywords)
    )


def check_casts(node: ast.AST, ctx: Context) -> None:
    if not isinstance(node, ast.Call):
        return
    upcast = _upcast_method(node, ctx)
    if upcast is not None and _of_a_factory(node, ctx):
        return  # torch.arange(n).float(): HP101's finding (an integer factory made fp32)
    if upcast is not None:
        ctx.report(
            node,
            "HP201",
            f"`{upcast}` upcasts to fp32 in forward; use `.to(x.dtype)` unless fp32 is needed "
            "for accuracy (then suppress with `# halfprec: ignore[HP201]`)",
            made=node,
        )
        return
    for kw in node.keywords:
        if kw.arg == "dtype" and is_fp32_dtype(kw.value, ctx):
            callee = dotted(node.func).rsplit(".", 1)[-1] or "call"
            ctx.report(
                kw.value,
                "HP202",
                f"`{callee}(..., dtype={dotted(kw.value)})` hard-codes fp32 in forward; "
                "use `dtype=x.dtype` of a tensor in scope",
                made=node,
            )
    if ctx.is_torch_attr(node.func, "get_default_dtype") is not None:
        template = template_at(node, ctx)
        fix = None
        if template:
            fix = Fix(EXPR, *span(node, ctx), f"{template}.dtype", unsafe=not ctx.template_known)
        use = f"`{template}.dtype`" if template else "the dtype of a tensor in scope"
        ctx.report(
            node,
            "HP203",
            f"`torch.get_default_dtype()` stays fp32 in a half model; use {use}",
            fix,
        )
