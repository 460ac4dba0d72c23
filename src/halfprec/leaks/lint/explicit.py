"""Values that are fp32 because the library's own explicit upcast met half values in them
(see :mod:`.fate`): ``grid = make_grid(h, w).float() + flow`` is fp32 in a half model
because of ``.float()``, whatever else is added to it later.

A factory's tensor that meets such a value (``grid + torch.linspace(-r, r, n)``) carries
no fp32 of its own into half values: the result is fp32 because of the upcast, and made
half the factory's tensor would leave it fp32. The upcast is what carries fp32 on (HP2's
to judge, or the integer table's, where it is one). An explicit fp32 value that has met no
half value yet (``torch.arange(n).float()``, ``(ids > 0).float()``) is fp32 from integers,
as a factory's tensor is: what meets it goes on (see :func:`.fate._half_upcast`).

An explicit fp32 value is ``.float()``, ``.double()``, ``.to(torch.float32)`` or a factory
with ``dtype=torch.float32``/``torch.float64``, seen through reshapes, device moves,
element reads and the names it is bound to, and the ``return`` of a function or method of
the same file that hands one back (``coords_grid(...)`` returning ``stack(...).float()``).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.nodes import arithmetic_leaves, walk
from halfprec.leaks.lint.scope import Function
from halfprec.leaks.lint.values import value_of

_DEPTH = 8  # names and calls followed back from one operand
_PASSES = words(
    "view reshape permute transpose contiguous flatten unsqueeze squeeze expand expand_as "
    "repeat clone detach movedim unflatten cpu cuda view_as reshape_as"
)
_JOINS = words("cat stack concat concatenate")
_FP32 = ("float32", "float", "float64", "double")


def bound_upcast(node: ast.AST, ctx: Context) -> bool:
    """Whether ``node`` reads a name (reshaped or not) bound earlier to a value made fp32 by
    an explicit upcast that met a value of the model's dtype (``grid = g.float() + flow``).
    An expression computed with the factory's tensor (``keep * t + (1 - keep) * h``) is
    judged as one op with it, not here."""
    return isinstance(through(node, ctx), ast.Name) and upcast_met_half(node, ctx)


def upcast_met_half(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether ``node`` holds a value made fp32 by an explicit upcast that met a value of
    the model's dtype: ``x.float() + h`` (or a name bound to one, reshaped on the way)."""
    node = through(node, ctx)
    if isinstance(node, ast.Name):
        bound = ctx.binding_before(node) if depth < _DEPTH else None
        return bound is not None and upcast_met_half(bound, ctx, depth + 1)
    leaves = _operands(node, ctx)
    if len(leaves) < 2:
        return False
    explicit = [leaf for leaf in leaves if explicit_fp32(leaf, ctx, depth)]
    if explicit and any(
        leaf not in explicit and value_of(leaf, ctx.at(leaf)) is not None for leaf in leaves
    ):
        return True
    return any(upcast_met_half(leaf, ctx, depth + 1) for leaf in leaves)


def explicit_fp32(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """``.float()``, ``.double()``, ``.to(torch.float32)``, a ``dtype=torch.float32``
    factory, a name bound to one, or a same-file helper returning one."""
    node = through(node, ctx)
    if depth >= _DEPTH:
        return False
    if isinstance(node, ast.Name):
        bound = ctx.binding_before(node)
        return bound is not None and explicit_fp32(bound, ctx, depth + 1)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ("float", "double") and not node.args:
        return True
    if any(_names_fp32(arg, ctx) for arg in _dtype_args(node)):
        return True
    returned = helper_returns(node, ctx)
    return bool(returned) and all(explicit_fp32(v, there, depth + 1) for v, there in returned)


def helper_returns(call: ast.Call, ctx: Context) -> list[tuple[ast.AST, Context]]:
    """The values a same-file helper run by ``call`` returns, each with the helper's walk
    as it stands there; empty where ``call`` runs no such helper."""
    helper = _helper(call, ctx)
    if helper is None:
        return []
    fn, there = helper
    values = there.calls.returns(fn) if there.calls is not None else []
    return [(v, there.at(v)) for v in values]


def through(node: ast.AST, ctx: Context) -> ast.AST:
    """The value under reshapes, device moves and element reads: ``g[None].repeat(b, 1)``."""
    for _ in range(16):
        if isinstance(node, ast.Subscript):
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and (node.func.attr in _PASSES or node.func.attr == "to" and not _casts(node, ctx))
            and dotted(node.func.value) != "self"  # self.reshape(x): a method, not a tensor's
        ):
            node = node.func.value
        else:
            break
    return node


def _casts(call: ast.Call, ctx: Context) -> bool:
    """``t.to(...)`` naming a dtype or a tensor (not only a device)."""
    for arg in _dtype_args(call) + list(call.args):
        text = dotted(arg)
        if text.split(".")[0] in ctx.imports.torch or text.endswith("dtype"):
            return True
    return any(k.arg is None for k in call.keywords)


def _dtype_args(call: ast.Call) -> list[ast.expr]:
    func = call.func
    positional = list(call.args) if isinstance(func, ast.Attribute) and func.attr == "to" else []
    return positional + [k.value for k in call.keywords if k.arg == "dtype"]


def _names_fp32(arg: ast.AST, ctx: Context) -> bool:
    text = dotted(arg)
    return text.split(".")[0] in ctx.imports.torch and text.rsplit(".", 1)[-1] in _FP32


def _operands(node: ast.AST, ctx: Context) -> list[ast.AST]:
    """The values one op combines: a chain of arithmetic, or the pieces of a join."""
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return arithmetic_leaves(node, through_unary=True)
    if isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] in _JOINS:
        first = node.args[0] if node.args else None
        if isinstance(first, (ast.List, ast.Tuple)):
            return list(first.elts)
    return []


def _helper(call: ast.Call, ctx: Context) -> tuple[Function, Context] | None:
    """The same-file function (``grid(...)``) or method of the class (``self.grid(...)``)
    that ``call`` runs, with a walk of it."""
    calls, func = ctx.calls, call.func
    if calls is None:
        return None
    program = calls.program
    fn: Function | None = None
    facts = ctx.facts
    if isinstance(func, ast.Name):
        fn = program.functions.get(func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = program.owner_of(ctx.function) if isinstance(ctx.function, Function) else None
        info = program.methods_of(owner) if func.value.id == "self" and owner else None
        fn = info[0].get(func.attr) if info is not None else None
    if fn is None or fn is ctx.function or id(fn) in calls.busy:
        return None
    if not any(isinstance(n, ast.Return) for n in walk(fn)):
        return None
    return fn, calls.context(fn, facts, fn.name == "forward")
