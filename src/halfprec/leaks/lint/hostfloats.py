"""Host data that ``torch.tensor(data)`` makes floating, followed back from the name
``data`` to where the function fills or makes it (see :mod:`.factories`):

- *a list filled with Python floats*: ``w = [[] for _ in range(b)]`` (or ``w = []``), then
  ``w[i].append(1 - j / n)`` in a loop: a true division, a float literal or ``float(...)``
  appended anywhere in the function makes ``torch.tensor(w)`` floating (fp32 for Python
  floats, fp64 for NumPy's);
- *a NumPy array made floating*: ``a = np.zeros(shape, dtype=np.float32)`` (any NumPy
  maker with a float ``dtype=``) or ``.astype(np.float32)``, then kept through NumPy's
  own reshaping methods (``a = a.transpose(...)``): ``torch.tensor(a)`` keeps its dtype;
  also stacked (``np.stack(xs)`` of a list ``xs`` appended such arrays) and returned by a
  method of the class (``x, y = self.make(k)``, or ``self.make = self._gauss`` chosen in
  ``__init__``: the array at that position of each ``return``).

An integer ``dtype=`` (``np.zeros_like(m, dtype=int)``) or an array whose maker shows no
dtype proves nothing: ``torch.tensor`` of it is left as data of unknown dtype.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
from halfprec.leaks.lint.context import Calls, Context, dotted, words
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.scope import Function

_MAX_DEPTH = 10
_NUMPY = words("np numpy")
_FLOAT_DTYPES = words("float32 float64 single double float float_ float16")
_JOINS = words("stack concatenate vstack hstack")
_KEEPS = words("transpose reshape copy squeeze swapaxes ravel flatten clip")


def host_floats(data: ast.AST, ctx: Context) -> bool:
    """Whether ``data`` (the argument of ``torch.tensor``) is a list this function fills
    with floats, or a NumPy array made floating (module docstring)."""
    return _numpy_float(data, ctx, 0) or (
        isinstance(data, ast.Name) and _appended_floats(data, ctx)
    )


def _float_dtype(node: ast.AST) -> bool:
    """``np.float32``, ``numpy.float64``, ``float``, ``"float32"``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in _FLOAT_DTYPES
    if isinstance(node, ast.Name):
        return node.id == "float"
    name = dotted(node)
    return name.split(".")[0] in _NUMPY and name.rsplit(".", 1)[-1] in _FLOAT_DTYPES


def _numpy_float(node: ast.AST, ctx: Context, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if isinstance(node, ast.Name):
        bound = ctx.binding_before(node)
        position = _unpacked(node, bound, ctx) if isinstance(bound, ast.Call) else None
        if isinstance(bound, ast.Call) and position is not None:
            return _returned_float(bound, position, ctx, depth + 1)
        return bound is not None and _numpy_float(bound, ctx, depth + 1)
    if isinstance(node, ast.Subscript):
        return _numpy_float(node.value, ctx, depth + 1)  # a[..., :2]: the same dtype
    if isinstance(node, ast.BinOp):  # 2 * a: a number keeps a's dtype
        numbers = [e for e in (node.left, node.right) if _number(e)]
        others = [e for e in (node.left, node.right) if not _number(e)]
        return len(numbers) == 1 and _numpy_float(others[0], ctx, depth + 1)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "astype":
        return bool(node.args) and _float_dtype(node.args[0])
    if isinstance(func, ast.Attribute) and func.attr in _KEEPS:
        owner = dotted(func.value)
        if owner in _NUMPY:  # np.transpose(a): a's dtype
            return bool(node.args) and _numpy_float(node.args[0], ctx, depth + 1)
        return _numpy_float(func.value, ctx, depth + 1)
    name = dotted(func)
    if name.split(".")[0] not in _NUMPY:
        return False
    if name.rsplit(".", 1)[-1] in _JOINS and node.args:  # np.stack([a, b]): floats if one is
        pieces = node.args[0]
        elts = pieces.elts if isinstance(pieces, (ast.List, ast.Tuple)) else []
        if isinstance(pieces, ast.Name):
            elts = _appended(pieces, ctx)  # xs.append(a) in a loop, then np.stack(xs)
        return any(_numpy_float(e, ctx, depth + 1) for e in elts)
    return any(k.arg == "dtype" and _float_dtype(k.value) for k in node.keywords)


def _appended_floats(name: ast.Name, ctx: Context) -> bool:
    """``w[i].append(1 - j / n)`` (or ``w.append(...)``) of a list display ``w`` of this
    function."""
    bound = ctx.binding_before(name)
    rows = isinstance(bound, ast.List) and all(isinstance(e, ast.List) for e in bound.elts)
    if not rows and not (isinstance(bound, ast.ListComp) and isinstance(bound.elt, ast.List)):
        return False
    fn = ctx.function
    if fn is None:
        return False
    for node in walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "append" or len(node.args) != 1:
            continue
        holder = node.func.value
        while isinstance(holder, ast.Subscript):
            holder = holder.value
        if not (isinstance(holder, ast.Name) and holder.id == name.id):
            continue
        if _floatish(node.args[0]) and not _state_made(node.args[0], ctx, 0):
            return True
    return False


_HOST_CALLS = words("float int len abs round min max range")
_TO_HOST = words("numpy tolist item")


def _state_made(node: ast.AST, ctx: Context, depth: int) -> bool:
    """Whether ``node`` may be computed from tensors: it reads module state (``self.x``),
    calls anything but a builtin on numbers, ``math``, NumPy or a conversion to the host
    (``.numpy()``, ``.tolist()``, ``.item()``), or reads a name bound to such a value or a
    list appended such values (``sigma_ks[i]`` of ``sigma_ks.append(self.a[i] / self.b[i])``)."""
    if depth > 3:
        return True
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Call) and _host_call(sub):
            continue  # its value is on the host, whatever it was made from
        if isinstance(sub, ast.Attribute) and dotted(sub.value) == "self":
            return True
        if isinstance(sub, ast.Call):
            return True
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            bound = ctx.binding_before(sub)
            made = _appended(sub, ctx) if isinstance(bound, ast.List) else [bound]
            if any(v is not None and _state_made(v, ctx, depth + 1) for v in made):
                return True
        todo.extend(ast.iter_child_nodes(sub))
    return False


def _host_call(call: ast.Call) -> bool:
    """``float(n)``, ``math.log(n)``, ``np.sqrt(a)``, ``t.cpu().numpy()``, ``t.item()``."""
    name = dotted(call.func)
    if name in _HOST_CALLS or name.split(".")[0] in ("math", *_NUMPY):
        return True
    return isinstance(call.func, ast.Attribute) and call.func.attr in _TO_HOST


def _floatish(node: ast.AST) -> bool:
    """A Python float by its form: a float literal, a true division, ``float(...)``."""
    if isinstance(node, ast.Constant):
        return type(node.value) is float
    if isinstance(node, ast.UnaryOp):
        return _floatish(node.operand)
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Div) or _floatish(node.left) or _floatish(node.right)
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
    )


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _appended(name: ast.Name, ctx: Context) -> list[ast.expr]:
    """What ``name.append(v)`` appends in the walked function, for a list display ``name``."""
    bound = ctx.binding_before(name)
    lists = isinstance(bound, ast.Tuple) and all(isinstance(e, ast.List) for e in bound.elts)
    if not (isinstance(bound, ast.List) or lists) or ctx.function is None:
        return []  # xs = [] or xs, ys = [], []
    out: list[ast.expr] = []
    for use in ctx.names(name.id):
        method = ctx.parents.get(id(use))
        call = ctx.parents.get(id(method)) if isinstance(method, ast.Attribute) else None
        appends = isinstance(method, ast.Attribute) and method.attr == "append"
        if appends and isinstance(call, ast.Call) and len(call.args) == 1:
            out.append(call.args[0])
    return out


def _unpacked(name: ast.Name, value: ast.Call, ctx: Context) -> int | None:
    """The position of ``name`` in the tuple an assignment unpacks ``value`` into (``a, b =
    f()``: 1 for ``b``); None for any other binding."""
    for use in ctx.names(name.id):
        target = ctx.parents.get(id(use))
        if not isinstance(target, ast.Tuple):
            continue
        owner = ctx.parents.get(id(target))
        if isinstance(owner, ast.Assign) and owner.value is value:
            return next(i for i, e in enumerate(target.elts) if e is use)
    return None


def _returned_float(call: ast.Call, position: int, ctx: Context, depth: int) -> bool:
    """Whether every method of the class ``self.<m>(...)`` may run returns, at ``position``
    of its returned tuple, a NumPy array made floating."""
    calls, fn = ctx.calls, ctx.function
    func = call.func
    if calls is None or not isinstance(fn, Function):
        return False
    helpers = calls.program.functions
    if isinstance(func, ast.Name) and func.id in helpers:  # a function of the file
        return _returns_float([helpers[func.id]], NO_FACTS, position, calls, depth)
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    owner = calls.program.owner_of(fn) if func.value.id == "self" else None
    info = calls.program.methods_of(owner) if owner else None
    if info is None or owner is None:
        return False
    methods, facts = info
    names = [func.attr] if func.attr in methods else _chosen(func.attr, methods, calls, owner)
    return _returns_float([methods[n] for n in names], facts, position, calls, depth)


def _returns_float(
    fns: list[Function], facts: ClassFacts, position: int, calls: Calls, depth: int
) -> bool:
    """Whether each of ``fns`` returns a NumPy float array at ``position`` of its tuple."""
    found = False
    for fn in fns:
        there = calls.context(fn, facts, False)
        for value in calls.returns(fn):
            if not (isinstance(value, ast.Tuple) and position < len(value.elts)):
                return False
            if not _numpy_float(value.elts[position], there, depth + 1):
                return False
            found = True
    return found


def _chosen(attr: str, methods: dict[str, Function], calls: Calls, owner: str) -> list[str]:
    """The methods ``self.<attr> = self.<method>`` binds in the class (chosen at run time)."""
    cls = calls.program.classes.get(owner)
    out: list[str] = []
    for node in walk(cls) if cls is not None else []:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not (isinstance(target, ast.Attribute) and target.attr == attr):
            continue
        for one in (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,):
            if not (isinstance(one, ast.Attribute) and one.attr in methods):
                return []  # also bound to something else
            out.append(one.attr)
    return out
