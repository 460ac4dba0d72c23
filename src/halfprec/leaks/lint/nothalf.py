"""Values that stay out of half in a converted model (see HP302 in :mod:`.constants`).

``torch.finfo(torch.float32).tiny`` is a false alarm where every tensor it meets is fp32 or
fp64 by its own code, as ``model.half()`` changes no such tensor: one made with
``dtype=torch.float32`` (or an integer dtype), ``.float()``/``.double()``/``.long()``,
``.to(torch.float64)``; integer data (``torch.argmax``, ``torch.arange(n)``, a comparison) and
what keeps its dtype (``torch.histc`` of it, ``torch.sort(h).values``, ``t.abs()``); Python
numbers; a name bound to one of these before. A parameter, a submodule's output or anything
else may be half. A pure number (``eps = torch.finfo(torch.float32).eps``) is followed to
where the name is read: it is silent only if every read meets no half tensor either.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.casts import is_fp32_dtype
from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.decided import binding_of, checked, passed, returned
from halfprec.leaks.lint.pyints import int_scalar
from halfprec.leaks.lint.scalars import integer_tensor

_MAX_DEPTH = 64  # values followed back, through callers and helpers' returns too
_MAX_STEPS = 4000  # values judged for one limit: past that, it may meet half
_steps = [0]
_MAX_NAMES = 4  # names bound to pure numbers followed from a limit (eps, tol = 8 * eps, ...)
_PICKS = words("where maximum minimum fmax fmin")
_TO_NUMBER = words("float double long int bool short byte")
_KEEPS = words(
    "abs clone squeeze unsqueeze view reshape flatten contiguous detach sum cumsum"
    " gather expand expand_as transpose permute neg sqrt exp log clamp unbind chunk split narrow"
    " min max amin amax mean"
)
_INTEGER_DTYPES = words("long int int64 int32 int16 int8 uint8 bool")
_INTEGER_RESULTS = words(
    "argmax argmin argsort bincount nonzero any all isfinite isnan isinf logical_and logical_or"
    " logical_not"
)
_SORTS = words("sort topk")
_CLAMPS = words("clamp clamp_min clamp_max clip")
_LIKE = words("zeros_like ones_like empty_like full_like")
_PASSES = (ast.BinOp, ast.UnaryOp)


def _dtype_out_of_half(node: ast.AST, ctx: Context) -> bool:
    return is_fp32_dtype(node, ctx) or ctx.is_torch_attr(node, *_INTEGER_DTYPES) is not None


def out_of_half(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether ``node`` is a number or a tensor that is not half in a converted model."""
    _steps[0] += 1
    if depth > _MAX_DEPTH or _steps[0] > _MAX_STEPS:
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float))
    if isinstance(node, (ast.Compare, ast.BoolOp)) or int_scalar(node):
        return True
    if isinstance(node, ast.BinOp):
        return all(out_of_half(s, ctx, depth + 1) for s in (node.left, node.right))
    if isinstance(node, ast.UnaryOp):
        return out_of_half(node.operand, ctx, depth + 1)
    if isinstance(node, ast.Subscript):
        return out_of_half(node.value, ctx, depth + 1)
    if isinstance(node, ast.Name):
        value, index, since = binding_of(node, ctx)
        if checked(node, ctx, since):
            return True  # if t.dtype != torch.float32: raise ... (see .decided)
        if value is None:
            return passed(node, ctx, out_of_half, depth)  # a parameter: what callers pass
        if index is not None:  # a, b = helper(...): its returns' element
            return isinstance(value, ast.Call) and returned(value, index, ctx, out_of_half, depth)
        return out_of_half(value, ctx, depth + 1)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(out_of_half(e, ctx, depth + 1) for e in node.elts)
    if isinstance(node, ast.Attribute) and node.attr in ("values", "indices"):
        if node.attr == "indices":
            return True
        data = _sorted(node.value, ctx) if isinstance(node.value, ast.Call) else None
        return data is not None and out_of_half(data, ctx, depth + 1)
    if isinstance(node, ast.Call):
        return _call(node, ctx, depth)
    return _finfo_value(node, ctx)


def _sorted(call: ast.Call, ctx: Context) -> ast.AST | None:
    """What ``torch.sort(t)`` or ``t.topk(k)`` sorts."""
    func = call.func
    if ctx.is_torch_attr(func, *_SORTS) is not None and call.args:
        return call.args[0]
    if isinstance(func, ast.Attribute) and func.attr in _SORTS:
        return func.value
    return None


def _finfo_value(node: ast.AST, ctx: Context) -> bool:
    """``torch.finfo(...).eps``: a Python number."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and ctx.is_torch_attr(node.value.func, "finfo", "iinfo") is not None
    )


def _call(call: ast.Call, ctx: Context, depth: int) -> bool:
    func = call.func
    if any(k.arg == "dtype" and _dtype_out_of_half(k.value, ctx) for k in call.keywords):
        return True
    if integer_tensor(call, ctx) or ctx.is_torch_attr(func, *_INTEGER_RESULTS) is not None:
        return True
    if dotted(func).startswith("math."):
        return True
    if isinstance(func, ast.Name):  # a function of the tree: what it returns
        return returned(call, None, ctx, out_of_half, depth)
    if not isinstance(func, ast.Attribute):
        return False
    picked = ctx.is_torch_attr(func, *_PICKS)  # torch.where(c, a, b): a's or b's dtype
    if picked is not None:
        values = call.args[1:] if picked == "where" else call.args
        return bool(values) and all(out_of_half(v, ctx, depth + 1) for v in values)
    if ctx.is_torch_attr(func, "cat", "stack", "concat") is not None and call.args:
        return out_of_half(call.args[0], ctx, depth + 1)  # every piece out of half
    if func.attr.startswith("new_"):
        return out_of_half(func.value, ctx, depth + 1)  # t.new_zeros(n): t's dtype
    if func.attr in _TO_NUMBER and not call.args:
        return True
    if func.attr in _INTEGER_RESULTS:
        return True
    if func.attr == "to" and call.args and _dtype_out_of_half(call.args[0], ctx):
        return True
    if ctx.is_torch_attr(func, "histc", *_KEEPS, *_LIKE) is not None and call.args:
        return out_of_half(call.args[0], ctx, depth + 1)
    return func.attr in _KEEPS and out_of_half(func.value, ctx, depth + 1)


def _chain(node: ast.AST, ctx: Context) -> tuple[ast.AST, list[ast.AST]]:
    """The top of the arithmetic ``node`` is in (through ``math.*`` calls) and the
    operands it meets there."""
    met: list[ast.AST] = []
    parents = ctx.parents
    parent = parents.get(id(node))
    if isinstance(parent, ast.keyword):
        parent = parents.get(id(parent))
    while isinstance(parent, _PASSES) or _math_call(parent) or _bound_of(parent, ctx):
        if isinstance(parent, ast.BinOp):
            met.append(parent.right if node is parent.left else parent.left)
        if _bound_of(parent, ctx):
            met.append(_bound_of(parent, ctx))  # type: ignore[arg-type]
        node, parent = parent, parents.get(id(parent))  # type: ignore[assignment]
    return node, met


def _bound_of(node: ast.AST | None, ctx: Context) -> ast.AST | None:
    """The tensor ``torch.clamp_min(t, eps)`` or ``t.clamp(min=eps)`` bounds: the result
    has its dtype."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if ctx.is_torch_attr(func, *_CLAMPS) is not None:
        return node.args[0] if node.args else None
    if isinstance(func, ast.Attribute) and func.attr in _CLAMPS:
        return func.value
    return None


def _math_call(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Call) and dotted(node.func).startswith("math.")


def meets_no_half(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether the number at ``node`` (a ``torch.finfo(...).eps``) meets only values that
    are not half: in its arithmetic, and where a name bound to a pure number is read."""
    if depth > _MAX_NAMES:
        return False
    if depth == 0:
        _steps[0] = 0
    parent = ctx.parents.get(id(node))
    if isinstance(node, ast.Call) and isinstance(parent, ast.Attribute):
        node = parent
    top, met = _chain(node, ctx)
    if not all(out_of_half(m, ctx) for m in met):
        return False
    if any(not _number(m, ctx) for m in met):
        return True  # it meets a tensor that is out of half: so is the result
    return _read_out_of_half(top, ctx, depth)


def _number(node: ast.AST, ctx: Context) -> bool:
    """A Python number by its code (not a tensor)."""
    if isinstance(node, ast.Constant) or int_scalar(node) or _finfo_value(node, ctx):
        return True
    if isinstance(node, ast.Call):
        return _math_call(node)
    if isinstance(node, ast.BinOp):
        return _number(node.left, ctx) and _number(node.right, ctx)
    if isinstance(node, ast.Name):
        bound = ctx.binding_before(node)
        return bound is not None and _number(bound, ctx)
    return False


def _read_out_of_half(top: ast.AST, ctx: Context, depth: int) -> bool:
    """``top`` is a pure number: bound to a name whose every read meets no half value."""
    parent = ctx.parents.get(id(top))
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name):
        return parent.func.id == "range"
    if not (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
        and ctx.function is not None
    ):
        return False
    name = parent.targets[0].id
    reads = [
        n
        for n in ast.walk(ctx.function)
        if isinstance(n, ast.Name)
        and n.id == name
        and isinstance(n.ctx, ast.Load)
        and ctx.binding_before(n) is top
    ]
    return all(meets_no_half(r, ctx, depth + 1) for r in reads)
