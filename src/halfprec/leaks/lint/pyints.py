"""Python ints known from the code that binds them: the data of ``torch.tensor(n)`` that
makes a 0-dim tensor (see :mod:`.scalars`), where a name alone may as well hold a list.

An int here: an int literal; ``x.shape[i]``, ``x.size(i)``, ``len(...)``, ``int(...)``,
``x.dim()``, ``x.numel()``; ``+ - * // %`` of those; a name every binding of the function
binds to one (``n = x.shape[-1]``), to an element of a shape unpacked
(``b, c, h, w = x.shape``), or to a ``range``'s counter. A parameter, a name bound
anywhere else, or a tensor's element (``t[0]``) is not known to be an int.
"""

from __future__ import annotations

import ast
import functools

from halfprec.leaks.lint.memo import on_forget
from halfprec.leaks.lint.nodes import walk

_INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_COUNTS = frozenset({"dim", "ndimension", "numel", "nelement"})
_MAX_DEPTH = 4


def int_scalar(node: ast.AST, names: frozenset[str] = frozenset(), depth: int = 0) -> bool:
    """Whether ``node`` is a Python int by its code (``names``: names known to hold one)."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return int_scalar(node.operand, names, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _INT_OPS):
        return all(int_scalar(s, names, depth + 1) for s in (node.left, node.right))
    if isinstance(node, ast.Subscript):  # x.shape[-1]; x.shape[1:] is a tuple
        return _shape(node.value) and not isinstance(node.slice, ast.Slice)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id in ("len", "int") and len(node.args) == 1
        if isinstance(func, ast.Attribute):
            if func.attr == "size":
                return len(node.args) == 1 and not node.keywords
            return func.attr in _COUNTS and not node.args
    return False


def _shape(node: ast.AST) -> bool:
    """``x.shape`` or ``x.size()``: a tuple of ints."""
    if isinstance(node, ast.Attribute):
        return node.attr == "shape"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "size"
        and not node.args
    )


def int_bound(name: str, fn: ast.AST | None) -> bool:
    """Whether every binding of ``name`` in ``fn`` binds a Python int (module docstring)."""
    return fn is not None and name in _int_names(fn)


@functools.lru_cache(maxsize=64)
def _int_names(fn: ast.AST) -> frozenset[str]:
    """The names of ``fn`` every binding of which is an int (one walk per function, and a
    few passes for names bound from other such names)."""
    binds: dict[str, list[ast.AST | None]] = {}
    for node in walk(fn):
        if isinstance(node, ast.arg):
            binds.setdefault(node.arg, []).append(None)  # a parameter: any value
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                _record(target, node.value, binds)
        elif isinstance(node, (ast.For, ast.comprehension)):
            counted = _ranged(node.iter)
            _record(node.target, ast.Constant(0) if counted else None, binds)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            augmented = isinstance(node, ast.AugAssign)
            _record(node.target, node.value, binds, augmented=augmented)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    _record(item.optional_vars, None, binds)
    known: frozenset[str] = frozenset()
    for _ in range(3):
        grown = frozenset(
            n
            for n, values in binds.items()
            if all(v is not None and int_scalar(v, known) for v in values)
        )
        if grown == known:
            break
        known = grown
    return known


def _record(
    target: ast.AST,
    value: ast.AST | None,
    binds: dict[str, list[ast.AST | None]],
    augmented: bool = False,
) -> None:
    if isinstance(target, ast.Name):
        if augmented and value is not None:
            assert isinstance(value, ast.expr)
            value = ast.BinOp(ast.Name(target.id), ast.Add(), value)  # n += 1: int if both are
        binds.setdefault(target.id, []).append(value)
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        element: ast.AST | None = ast.Constant(0) if value is not None and _shape(value) else None
        for e in target.elts:
            _record(
                e.value if isinstance(e, ast.Starred) else e,
                None if isinstance(e, ast.Starred) else element,
                binds,
            )
        return
    for n in walk(target):  # h[0] = v, self.n = v: no name bound
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            binds.setdefault(n.id, []).append(None)


def _ranged(node: ast.AST) -> bool:
    """``range(...)``: its counter is an int."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
    )


on_forget(_int_names.cache_clear)
