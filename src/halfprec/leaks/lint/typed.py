"""Python floats known from a file's type annotations: the data of ``torch.tensor(...)``
that makes an fp32 tensor although no float literal is in sight.

- a call of a function of the file annotated ``-> float`` (``def score(h) -> float``), or
  ``-> List[float]``;
- a list, tuple or comprehension of such values (``[score(h) for h in hypos]``);
- a name annotated ``float`` or a sequence of floats (a parameter ``scores: List[float]``,
  a local ``new: List[float] = []``), or bound to one of the above; an element of such a
  sequence in a list (``[hw[1], 0]`` of ``hw: Tuple[float, float]``);
- a name some assignment of the function binds to a float literal (``extra = 0.0`` on one
  branch): ``torch.tensor(extra)`` makes a 0-dim fp32 tensor on that branch;
- a parameter defaulting to a float literal (``offset: float = 0.5``).

A ``dtype`` parameter defaulting to ``torch.float`` that no call of the file passes is fp32:
``.to(dtype=dtype)`` there is a cast to fp32, not to the model's dtype.

An annotation naming ``Tensor`` or ``int`` as well (``Union[float, Tensor]``) proves nothing.
"""

from __future__ import annotations

import ast
import functools

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.casts import is_fp32_dtype
from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.memo import on_forget
from halfprec.leaks.lint.nodes import parameters

_MAX_DEPTH = 3
_SEQUENCES = frozenset({"List", "list", "Sequence", "Tuple", "tuple", "Optional"})


def float_annotation(annotation: ast.AST | None, sequence: bool = False) -> bool:
    """``float``, ``List[float]``, ``Optional[Sequence[float]]``: Python floats only;
    with ``sequence``, a sequence of them (not one float)."""
    if annotation is None:
        return False
    names = {_name(n) for n in ast.walk(annotation)} - {""}
    floats = "float" in names and names <= _SEQUENCES | {"float", "typing"}
    return floats and (not sequence or bool(names & (_SEQUENCES - {"Optional"})))


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value  # "float" in a string annotation
    return node.id if isinstance(node, ast.Name) else ""


def typed_floats(data: ast.AST, ctx: Context, depth: int = 0, scalar: bool = False) -> bool:
    """Whether ``data`` holds Python floats by the file's annotations (module docstring).
    Unless ``scalar`` (a fill value), a name given alone must be a sequence of floats:
    ``torch.tensor(temp)`` of one float is 0-dim, which the lint does not tell from a list
    by the name."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(data, (ast.ListComp, ast.GeneratorExp)):
        return typed_floats(data.elt, ctx, depth + 1)
    if isinstance(data, (ast.List, ast.Tuple)):
        return any(typed_floats(e, ctx, depth + 1) for e in data.elts)
    if isinstance(data, ast.BinOp) and isinstance(data.op, ast.Mult):  # [self.eps] * n
        return any(
            isinstance(e, ast.List) and typed_floats(e, ctx, depth + 1)
            for e in (data.left, data.right)
        )
    if isinstance(data, ast.Attribute) and depth > 0:  # [self.eps]: the class's float
        return (
            isinstance(data.value, ast.Name)
            and data.value.id == "self"
            and data.attr in ctx.facts.floats
        )
    if isinstance(data, ast.Subscript) and depth > 0 and isinstance(data.value, ast.Name):
        return _annotated(data.value.id, ctx, sequence=True)  # [hw[1], 0], hw: Tuple[float, ...]
    if isinstance(data, ast.Call) and isinstance(data.func, ast.Name):
        calls = ctx.calls
        fn = calls.program.functions.get(data.func.id) if calls is not None else None
        return fn is not None and float_annotation(fn.returns)
    if isinstance(data, ast.Name):
        if _annotated(data.id, ctx, sequence=depth == 0 and not scalar):
            return True
        bound = ctx.binding_before(data)
        return bound is not None and typed_floats(bound, ctx, depth + 1)
    return False


def _annotated(name: str, ctx: Context, sequence: bool) -> bool:
    """``name`` is a parameter or a local of the walked function annotated as floats (as
    a sequence of floats)."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        if p.arg == name:
            return float_annotation(p.annotation, sequence)
    for node in ast.walk(fn):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == name:
            assert isinstance(node, ast.AnnAssign)
            return float_annotation(node.annotation, sequence)
    return False


def float_bound(name: str, fn: ast.AST | None) -> bool:
    """Whether an assignment in ``fn`` binds ``name`` to a float literal (``l1 = 0.0``)."""
    return fn is not None and name in _float_names(fn)


@functools.lru_cache(maxsize=64)
def _float_names(fn: ast.AST) -> frozenset[str]:
    """The names an assignment in ``fn`` binds to a float literal (one walk per function)."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assign):
            continue
        value = node.value.operand if isinstance(node.value, ast.UnaryOp) else node.value
        if isinstance(value, ast.Constant) and type(value.value) is float:
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(out)


def _parameter(name: str, ctx: Context) -> tuple[ast.arg, ast.expr | None] | None:
    """The parameter ``name`` of the walked function, with its default."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return next(((p, d) for p, d in parameters(fn) if p.arg == name), None)


def float_parameter(name: str, ctx: Context) -> bool:
    """A parameter defaulting to a float literal (``offset: float = 0.5``)."""
    found = _parameter(name, ctx)
    default = found[1] if found is not None else None
    return isinstance(default, ast.Constant) and type(default.value) is float


def fp32_default(node: ast.AST, ctx: Context) -> bool:
    """``dtype`` of ``def anchors(..., dtype=torch.float)`` that no call of the file passes."""
    if not isinstance(node, ast.Name) or ctx.binding_before(node) is not None:
        return False  # dtype = x.dtype rebinds it in the body
    found = _parameter(node.id, ctx)
    if found is None or found[1] is None or not is_fp32_dtype(found[1], ctx):
        return False
    fn, calls = ctx.function, ctx.calls
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    if calls is None:
        return True
    method = calls.program.owner_of(fn) is not None
    sites = calls.callers(fn)
    return all(argument_for(fn, site.call, found[0], method) is None for site in sites)


def scalar_parameter(
    name: str, call: ast.AST, fn: ast.AST | None, parents: dict[int, ast.AST] | None
) -> frozenset[str]:
    """The Python scalars (``float``, ``int``, ``bool``) a parameter ``name`` of ``fn`` holds
    at ``call`` by its annotation (``gamma: float | None``): empty unless every other member
    is ``None``, or a ``Tensor`` that a test around ``call`` rules out
    (``if not isinstance(gamma, torch.Tensor): gamma = torch.tensor(gamma)``)."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return frozenset()
    a = fn.args
    param = next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == name), None)
    if param is None or param.annotation is None:
        return frozenset()
    members = _members(param.annotation)
    scalars = members & _SCALARS
    rest = members - _SCALARS - {"None", "Optional", "Union"}
    if rest == {"Tensor"} and parents is not None and _not_tensor_at(name, call, parents):
        rest = set()
    return frozenset(scalars) if scalars and not rest else frozenset()


_SCALARS = frozenset({"float", "int", "bool"})


def _members(annotation: ast.AST) -> set[str]:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return {"?"}
    out = set()
    for n in ast.walk(annotation):
        if isinstance(n, ast.Constant) and n.value is None:
            out.add("None")
        elif (
            isinstance(n, ast.Attribute)
            or isinstance(n, ast.Name)
            and not _qualifier(n, annotation)
        ):
            out.add(_name(n))
    return out - {"typing", ""}


def _qualifier(node: ast.Name, annotation: ast.AST) -> bool:
    """``torch`` in ``torch.Tensor``: the module part of a dotted name."""
    return any(isinstance(n, ast.Attribute) and n.value is node for n in ast.walk(annotation))


def _not_tensor_at(name: str, node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether ``node`` runs only where ``name`` is no tensor: the body of ``if not
    isinstance(name, Tensor)`` / ``not torch.is_tensor(name)``, or the other branch of the
    test without ``not`` (also as ``a if isinstance(a, Tensor) else torch.tensor(a)``)."""
    child = node
    while id(child) in parents:
        parent = parents[id(child)]
        if isinstance(parent, (ast.If, ast.IfExp)):
            test, negated = parent.test, False
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, negated = test.operand, True
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            inside = any(s is child for s in body)
            orelse = parent.orelse if isinstance(parent.orelse, list) else [parent.orelse]
            chosen = inside if negated else any(s is child for s in orelse)
            if chosen and _tensor_test(test, name):
                return True
        child = parent
    return False


def _tensor_test(test: ast.AST, name: str) -> bool:
    """``isinstance(name, torch.Tensor)`` or ``torch.is_tensor(name)``."""
    if not (isinstance(test, ast.Call) and test.args):
        return False
    subject = test.args[0]
    if not (isinstance(subject, ast.Name) and subject.id == name):
        return False
    func = _name(test.func)
    if func == "is_tensor":
        return True
    kinds = test.args[1] if func == "isinstance" and len(test.args) == 2 else None
    names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds] if kinds is not None else []
    return any(_name(k) == "Tensor" for k in names)


on_forget(_float_names.cache_clear)
