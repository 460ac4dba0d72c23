"""An fp32 tensor written into a keyed store that half values share (see :mod:`.fate`).

``g.edata["w"] = torch.ones(n, 1)`` beside ``g.ndata["h"] = h``, then
``g.update_all(fn.u_mul_e("h", "w", "m"), ...)``: the graph library reads both entries by
their keys and multiplies them, so the fp32 weight meets the half features where the lint
cannot see it (DGL's kernels raise on mixed dtypes; others promote). The store is an
object's keyed attribute (``g.edata[k]``) or a name (``parts[k]``), under a string key;
``g.nodes["user"].data[k]`` is one of ``g``'s; the value is a leak when, in the same
function, after it is written

- the store is handed on: a method of the object is called (``g.update_all(...)``, not a
  container's own ``get``/``items``/...), or the object is passed to a call; and
- a half value was written into the same object before that call (``g.ndata["h"] = h``),
  or, for an object's keyed attribute, the call takes half values with it (``conv(g, h)``).

Not a leak: a store whose entry the function reads back (``g.edata["w"].to(h.dtype)``: the
read is followed as any value is), one only of fp32 or integer values, a placeholder with
no elements (``torch.empty(0)``), one kept on ``self`` (followed to its reads by
:mod:`.reach`), and a dict handed with half values but holding none (``model(h,
**kwargs)`` of ``kwargs["mask"] = t``: a model casts the masks it is given).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from halfprec.leaks.lint.context import words
from halfprec.leaks.lint.nodes import children, walk
from halfprec.leaks.lint.reach import Follow
from halfprec.leaks.lint.values import activation_input

_CONTAINER = words(
    "get pop popitem update items keys values setdefault copy clear append extend insert "
    "remove index count"
)


def shared_store_leak(f: Follow, target: ast.Subscript, stmt: ast.stmt) -> bool:
    """Whether writing the followed tensor by ``target = ...`` (the statement ``stmt``)
    hands it, in a store shared with half values, to a call that combines them."""
    key = target.slice
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return False
    holder = target.value
    root = _root(holder)
    fn = f.ctx.function
    if not isinstance(root, ast.Name) or root.id == "self" or fn is None or f.empty:
        return False  # (a string key proves the holder no tensor; an empty one meets nothing)
    after = _end(stmt)
    if any(_at(n) >= after for n in _reads(fn, holder, key.value)):
        return False  # read back here: that read is followed
    features = _features(f, root.id)

    def half(value: ast.AST) -> bool:
        if isinstance(value, ast.Name) and value.id == root.id:
            return False
        return f.floating(value) or _reads_features(value, features)

    stored = [_at(s) for s in _stores(fn, root.id) if s is not stmt and half(s.value)]
    for call in _handed(fn, root.id):
        if _at(call) < after:
            continue
        if any(at < _at(call) for at in stored):
            return True
        taken = [*call.args, *(k.value for k in call.keywords)]
        if holder is not root and any(half(v) for v in taken):
            return True  # g.edata["w"] = t, then conv(g, h): an object's frame goes with h
    return False


def _features(f: Follow, store: str) -> set[str]:
    """The names holding ``forward``'s activation when its first input is the store (a
    graph: ``forward(self, graph, feat)``, which the lint otherwise takes as the
    activation): the next input, unless its name or annotation says otherwise, and the
    names bound to values read from it (``h = feat * norm``)."""
    fn = f.ctx.function
    if not (f.ctx.is_forward and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))):
        return set()
    inputs = [p for p in (*fn.args.posonlyargs, *fn.args.args) if p.arg not in ("self", "cls")]
    if len(inputs) < 2 or inputs[0].arg != store or not activation_input(inputs[1]):
        return set()
    names = {inputs[1].arg}
    bound = [n for n in walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1]
    for _ in range(_MAX_ALIASES):
        more = {
            n.targets[0].id
            for n in bound
            if isinstance(n.targets[0], ast.Name) and _reads_features(n.value, names)
        }
        if more <= names:
            break
        names |= more
    return names


def _reads_features(value: ast.AST, names: set[str]) -> bool:
    """Whether ``value`` reads the values of one of ``names`` (``h * w``, ``d.to(h)``), not
    only its shape, device or dtype, and is not made integer or fp32 on purpose."""
    if not names:
        return False
    func = value.func if isinstance(value, ast.Call) else None
    if isinstance(func, ast.Attribute) and func.attr in _NOT_HALF:
        return False  # h.long(), h.float(): no half values
    parents = {id(c): p for p in walk(value) for c in children(p)}
    for n in walk(value):
        if isinstance(n, ast.Name) and n.id in names:
            up = parents.get(id(n))
            if not (isinstance(up, ast.Attribute) and up.attr in _FACTS):
                return True
    return False


_MAX_ALIASES = 4
_FACTS = words("shape size device dtype ndim dim numel is_cuda")
_NOT_HALF = words("long int bool float double item tolist numel size dim")


def _at(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _root(node: ast.expr) -> ast.expr:
    """The object at the bottom of ``g.nodes["user"].data``: ``g``."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _rooted(node: ast.AST, name: str) -> bool:
    """``name[k]``, ``name.attr[k]``, ``name.nodes[t].data[k]``: a keyed entry of the
    object ``name``."""
    if not isinstance(node, ast.Subscript):
        return False
    root = _root(node.value)
    return isinstance(root, ast.Name) and root.id == name


def _stores(fn: ast.AST, name: str) -> Iterator[ast.Assign]:
    """The assignments of ``fn`` into a keyed entry of ``name``."""
    for node in walk(fn):
        if isinstance(node, ast.Assign) and any(_rooted(t, name) for t in node.targets):
            yield node


def _reads(fn: ast.AST, holder: ast.expr, key: str) -> Iterator[ast.Subscript]:
    """The reads of ``holder[key]`` in ``fn`` (the same object, attribute and key)."""
    shape = ast.dump(holder)
    for node in walk(fn):
        if not (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)):
            continue
        index = node.slice
        if isinstance(index, ast.Constant) and index.value == key and ast.dump(node.value) == shape:
            yield node


def _handed(fn: ast.AST, name: str) -> Iterator[ast.Call]:
    """The calls of ``fn`` that take the object ``name`` on: its own methods (a
    container's are not), or calls it is an argument of."""
    for node in walk(fn):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        method = func.attr if isinstance(func, ast.Attribute) else ""
        on = func.value if isinstance(func, ast.Attribute) else None
        if isinstance(on, ast.Name) and on.id == name and method not in _CONTAINER:
            yield node
            continue
        values = [*node.args, *(k.value for k in node.keywords)]
        if any(isinstance(v, ast.Name) and v.id == name for v in values):
            yield node
