"""Which values are 0-dim tensors (see :mod:`.fate`). A 0-dim fp32 tensor never promotes
a half tensor with dimensions (``torch.tensor(0.5) * h`` is half), but with another 0-dim
tensor the usual promotion holds: ``torch.tensor(0.) + h.mean()`` is fp32. So an fp32
accumulator (``loss = torch.zeros(())``) that sums 0-dim half losses makes the loss fp32.

0-dim here: a factory of no size (``torch.tensor(0.)``, ``torch.zeros(())``); a full
reduction (``h.mean()``, ``torch.sum(h)``); a loss of ``torch.nn.functional`` or an
``nn.*Loss`` layer without ``reduction="none"``; a call of a function of the file, or of an
attribute holding one (``self.loss_fn = loss_fn`` with that default), whose return is
0-dim; arithmetic and elementwise ops on such values; a name bound to one.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.pyints import int_bound, int_scalar
from halfprec.leaks.lint.typed import float_bound, scalar_parameter

_REDUCTIONS = words("sum mean max min amax amin prod norm std var logsumexp nansum nanmean")
_ELEMENTWISE = words(
    "sub add mul div neg abs sqrt rsqrt exp log log1p pow square clamp clamp_min clamp_max "
    "sigmoid tanh relu float double half bfloat16 to type type_as detach clone"
)
LOSSES = words(
    "cross_entropy binary_cross_entropy binary_cross_entropy_with_logits kl_div nll_loss "
    "mse_loss l1_loss smooth_l1_loss huber_loss poisson_nll_loss gaussian_nll_loss "
    "cosine_embedding_loss margin_ranking_loss hinge_embedding_loss soft_margin_loss "
    "multilabel_soft_margin_loss triplet_margin_loss ctc_loss"
)
_MAX_DEPTH = 10  # names, operators and calls followed to a 0-dim value


_SEQUENCES = words("list tuple sorted range reversed zip map")


def zero_dim_factory(
    kind: str,
    call: ast.Call,
    lists: frozenset[str] = frozenset(),
    fn: ast.AST | None = None,
    parents: dict[int, ast.AST] | None = None,
) -> bool:
    """``torch.rand([])``, ``torch.full((), v)``, ``torch.tensor(0.5)``: a factory of no
    size; ``lists`` names the attributes of ``self`` that hold lists, not scalars; ``fn``,
    the function whose float literals a name given alone may hold (``torch.tensor(l1)``),
    or whose parameter is annotated as a scalar there (``gamma: float | Tensor`` where
    ``parents`` show a test ruling the tensor out)."""
    if not call.args:
        return False
    first = call.args[0]
    if kind == "tensor" and isinstance(first, ast.Name):
        name = first.id
        scalar = bool(scalar_parameter(name, call, fn, parents))
        return scalar or float_bound(name, fn) or int_bound(name, fn)
    if kind == "tensor" and int_scalar(first):
        return True  # torch.tensor(x.shape[-1]): an int of a shape
    if kind == "tensor":  # a scalar, not a list: torch.tensor(torch.finfo(x.dtype).min)
        if isinstance(first, ast.Attribute) and dotted(first.value) == "self":
            return first.attr not in lists
        if isinstance(first, ast.Attribute) and first.attr == "shape":
            return False  # torch.tensor(x.shape): one dimension
        if isinstance(first, ast.BinOp):  # torch.tensor(1 / 0.07); [0.0] * n is a list
            return not any(isinstance(n, (ast.List, ast.Tuple)) for n in ast.walk(first))
        return isinstance(first, (ast.Constant, ast.UnaryOp, ast.Attribute)) or (
            isinstance(first, ast.Call)
            and isinstance(first.func, ast.Name)
            and first.func.id not in _SEQUENCES  # torch.tensor(list(d.values())): 1-dim
        )
    return isinstance(first, (ast.List, ast.Tuple)) and not first.elts and len(call.args) <= 2


def zero_dim(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether ``node`` is a 0-dim tensor (see the module docstring)."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(node, ast.Name):
        bound = ctx.binding_before(node)
        element = _element(bound, node.id, ctx)
        if element is not None and isinstance(bound, ast.Call):
            return _returns_zero_dim(ctx, _function_of(ctx, bound.func), depth, bound.func, element)
        return bound is not None and zero_dim(bound, ctx, depth + 1)
    if isinstance(node, ast.BinOp):
        sides = [s for s in (node.left, node.right) if not number_name(s, ctx)]
        return bool(sides) and all(zero_dim(s, ctx, depth + 1) for s in sides)
    if isinstance(node, ast.UnaryOp):
        return zero_dim(node.operand, ctx, depth + 1)
    if isinstance(node, ast.IfExp):  # loss_fn(x, y) if weight else torch.tensor(0.)
        return all(zero_dim(s, ctx, depth + 1) for s in (node.body, node.orelse))
    return isinstance(node, ast.Call) and _zero_dim_call(node, ctx, depth)


def _zero_dim_call(call: ast.Call, ctx: Context, depth: int) -> bool:
    func = call.func
    name = dotted(func)
    last = func.attr if isinstance(func, ast.Attribute) else name
    owner = name.rsplit(".", 1)[0] if "." in name else ""
    if _unreduced(call):
        return False
    torch_call = owner in ctx.imports.torch or owner in ctx.imports.functional
    torch_call = torch_call or owner.endswith("nn.functional")
    if torch_call:
        kind = ctx.is_torch_attr(func, "tensor", "zeros", "ones", "empty", "full", "rand", "randn")
        if kind == "tensor" and _number_held(call, ctx):
            return True  # torch.tensor(C) of C = self.number_components
        if kind is not None:
            return zero_dim_factory(kind, call, ctx.facts.float_lists, ctx.function, ctx.parents)
        if last in LOSSES:
            return True
        if last in _REDUCTIONS:
            return len(call.args) == 1 and not _dims(call)
        return _all_zero_dim([*call.args, *(k.value for k in call.keywords)], ctx, depth)
    if isinstance(func, ast.Attribute) and not (
        isinstance(func.value, ast.Name) and func.value.id == "self"
    ):
        if last in _REDUCTIONS:
            return not call.args and not _dims(call)
        if last in _ELEMENTWISE:
            pieces = [func.value, *call.args, *(k.value for k in call.keywords)]
            return _all_zero_dim(pieces, ctx, depth)
        return False
    return _returns_zero_dim(ctx, _function_of(ctx, func), depth, func)


def _number_held(call: ast.Call, ctx: Context) -> bool:
    """``torch.tensor(c)`` of a name bound to a number the module was built with
    (``c = self.number_components``): no tensor, layer or list of floats, never called."""
    first = call.args[0] if len(call.args) == 1 else None
    bound = ctx.binding_before(first) if isinstance(first, ast.Name) else None
    if not (isinstance(bound, ast.Attribute) and dotted(bound.value) == "self"):
        return False
    facts, attr = ctx.facts, bound.attr
    if attr in facts.tensors or attr in dict(facts.layers) or attr in facts.float_lists:
        return False
    return not any(f"self.{attr}(" in line for line in ctx.lines)  # a number, never called


def number(node: ast.AST, ctx: Context) -> bool:
    """``0.5`` or ``self.weight`` of no tensor, layer or function (a number the module was
    built with)."""
    if isinstance(node, ast.Constant):
        return True
    attr = node.attr if isinstance(node, ast.Attribute) and dotted(node.value) == "self" else ""
    facts = ctx.facts
    held = attr in facts.tensors or attr in dict(facts.layers) or attr in dict(facts.callables)
    return bool(attr) and not held


def _all_zero_dim(pieces: list[ast.expr], ctx: Context, depth: int) -> bool:
    """Every tensor among ``pieces`` is 0-dim (numbers and dtypes are not tensors)."""
    tensors = [p for p in pieces if not isinstance(p, (ast.Constant, ast.Attribute))]
    return bool(tensors) and all(zero_dim(p, ctx, depth + 1) for p in tensors)


def _dims(call: ast.Call) -> bool:
    return any(k.arg in ("dim", "axis", "keepdim") for k in call.keywords)


def _unreduced(call: ast.Call) -> bool:
    """``reduction="none"``: a loss per element."""
    return any(
        k.arg == "reduction" and isinstance(k.value, ast.Constant) and k.value.value == "none"
        for k in call.keywords
    )


def _function_of(ctx: Context, func: ast.AST) -> str:
    """The function a call runs: ``norm_loss(...)``; ``self.criterion(...)`` of an attribute
    holding a function or a loss layer (``nn.MSELoss()``)."""
    if isinstance(func, ast.Name):
        return func.id
    if not (isinstance(func, ast.Attribute) and dotted(func.value) == "self"):
        return ""
    held = dict(ctx.facts.callables).get(func.attr)
    if held is not None:
        return held
    layer = dict(ctx.facts.layers).get(func.attr, "")
    return layer if layer.endswith("Loss") else ""


def _method(ctx: Context, func: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """``self.loss(...)``: the method of the walked function's class it runs."""
    calls, fn = ctx.calls, ctx.function
    if calls is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if not (isinstance(func, ast.Attribute) and dotted(func.value) == "self"):
        return None
    owner = calls.program.owner_of(fn)
    info = calls.program.methods_of(owner) if owner else None
    return info[0].get(func.attr) if info is not None else None


def _element(bound: ast.AST | None, name: str, ctx: Context) -> int | None:
    """``a, b = f(...)``: the position of ``name`` in the tuple its binding unpacks."""
    if bound is None:
        return None
    stmt = ctx.parents.get(id(bound))
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target = stmt.targets[0]
    if not isinstance(target, ast.Tuple):
        return None
    names = [e.id if isinstance(e, ast.Name) else "" for e in target.elts]
    return names.index(name) if name in names else None


def number_name(node: ast.AST, ctx: Context) -> bool:
    """A number, or a name last bound to one (``total = 0`` before ``total = total + l``),
    or an int of a shape (``x.shape[-1]``, ``n`` of ``b, n = x.shape``)."""
    if isinstance(node, ast.Name):
        bound = ctx.binding_before(node)
        if isinstance(bound, ast.Constant) and isinstance(bound.value, (int, float)):
            return True
        return int_bound(node.id, ctx.function)  # n = x.shape[-1]
    return number(node, ctx) or int_scalar(node)


def _returns_zero_dim(
    ctx: Context, function: str, depth: int, func: ast.AST, element: int | None = None
) -> bool:
    """``function`` is a loss of torch, an ``nn.*Loss`` layer, or a function or method of
    the file whose every return is 0-dim (``element``: whose every returned tuple holds a
    0-dim value there)."""
    last = function.rsplit(".", 1)[-1]
    if element is None and (last in LOSSES or (last.endswith("Loss") and last[:1].isupper())):
        return True
    calls = ctx.calls
    fn = calls.program.functions.get(function) if calls is not None and function else None
    fn = fn or _method(ctx, func)
    if calls is None or fn is None or depth >= _MAX_DEPTH:
        return False
    inner = calls.context(fn, ctx.facts, False)
    returned: list[ast.expr | None] = list(calls.returns(fn))
    if element is not None:
        returned = [r and _at(r, element) for r in returned]
    return bool(returned) and all(r is not None and zero_dim(r, inner, depth + 1) for r in returned)


def _at(value: ast.expr, element: int) -> ast.expr | None:
    """The ``element``-th value of a returned tuple (``return a, b``)."""
    if isinstance(value, ast.Tuple) and element < len(value.elts):
        return value.elts[element]
    return None


_INTEGER_FACTORIES = words("arange randint randperm")


def integer_tensor(node: ast.AST, ctx: Context) -> bool:
    """``torch.arange(n)`` (no float bound, no dtype), ``torch.randint(...)``, ``t.long()``:
    an integer tensor with dimensions, read through a subscript (``torch.arange(n)[None]``)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("long", "int") and not node.args:
        return True
    if ctx.is_torch_attr(node.func, *_INTEGER_FACTORIES) is None:
        return False
    given = [*node.args, *(k.value for k in node.keywords if k.arg != "device")]
    return not any(k.arg == "dtype" for k in node.keywords) and not any(
        isinstance(n, ast.Constant) and isinstance(n.value, float) for a in given for n in walk(a)
    )
