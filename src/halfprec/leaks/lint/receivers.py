"""Whether a fix may read a name where it is written: ``x.new_zeros(...)``,
``dtype=x.dtype`` and ``torch.finfo(x.dtype)`` raise when ``x`` is None there.

A name is usable at a node unless the code there says it may be None:

- a test around the node says it is None there: the body of ``if x is None:`` (also
  ``if not x:``, ``x is None or ...``), the ``else`` of ``if x is not None:`` (and of an
  ``elif`` under it), the matching side of ``a if x is None else b``;
- it may be None in the function (a parameter defaulting to None or annotated
  ``Optional``/``| None``, a name bound to None, a name compared with None) and neither a
  test around the node (``if x is not None:``) nor an earlier statement settles it: ``if
  x is None: x = ...`` or ``... raise``/``return``, ``assert x is not None``, or a
  rebinding to another value.

A name that is no parameter and not bound before the node (by position) is not usable
either. Where the name is not usable the finding is reported without a fix.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.nodes import walk

_ENDS = (ast.Raise, ast.Return, ast.Continue, ast.Break)


def usable(name: str, node: ast.AST, ctx: Context) -> bool:
    """Whether a fix at ``node`` may read ``name`` (see the module docstring)."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    said = _said_by_tests(name, node, ctx.parents)
    if said is not None:
        return said
    param = _param(fn, name)
    if param is None and not _bound_before(fn, name, node):
        return False
    if not _maybe_none(fn, name, param, node, ctx.parents):
        return True
    return _settled_before(name, node, ctx.parents)


def _param(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.arg | None:
    a = fn.args
    every = (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
    return next((p for p in every if p is not None and p.arg == name), None)


def _bound_before(fn: ast.AST, name: str, node: ast.AST) -> bool:
    where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
    return any(
        isinstance(n, ast.Name)
        and n.id == name
        and isinstance(n.ctx, ast.Store)
        and (n.lineno, n.col_offset) < where
        for n in walk(fn)
    )


def _maybe_none(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    name: str,
    param: ast.arg | None,
    node: ast.AST,
    parents: dict[int, ast.AST],
) -> bool:
    """A parameter defaulting to None or annotated as optional, a name bound to None before
    ``node`` (or in a loop around both), or compared with None anywhere in ``fn``."""
    if param is not None and (_none_default(fn, param) or _optional(param.annotation)):
        return True
    loops = _loops(node, parents)
    for n in walk(fn):
        if _none_bound(n, name) and (_before(n, node) or loops & _loops(n, parents)):
            return True
        if isinstance(n, ast.Compare) and _none_test(n, name) is not None:
            return True
    return False


def _none_bound(node: ast.AST, name: str) -> bool:
    """``name = None``."""
    return isinstance(node, ast.Assign) and _is_none(node.value) and _targets(node, name)


def _before(a: ast.AST, b: ast.AST) -> bool:
    return getattr(a, "lineno", 0) < getattr(b, "lineno", 0)


def _loops(node: ast.AST, parents: dict[int, ast.AST]) -> set[int]:
    """The loops around ``node`` (their ids)."""
    out = set()
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            out.add(id(node))
    return out


def _targets(stmt: ast.Assign, name: str) -> bool:
    return any(_names(t, name) for t in stmt.targets)


def _none_default(fn: ast.FunctionDef | ast.AsyncFunctionDef, param: ast.arg) -> bool:
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    if param in positional:
        index = positional.index(param) - (len(positional) - len(a.defaults))
        return index >= 0 and _is_none(a.defaults[index])
    if param in a.kwonlyargs:
        default = a.kw_defaults[a.kwonlyargs.index(param)]
        return default is not None and _is_none(default)
    return False


def _optional(note: ast.expr | None) -> bool:
    if note is None:
        return False
    if isinstance(note, ast.Constant) and isinstance(note.value, str):
        return "Optional" in note.value or "None" in note.value
    return any(
        _is_none(n)
        or isinstance(n, ast.Name)
        and n.id == "Optional"
        or isinstance(n, ast.Attribute)
        and n.attr == "Optional"
        for n in walk(note)
    )


def _is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _none_test(test: ast.AST, name: str) -> bool | None:
    """What ``test`` being true says of ``name``: True (it is None), False (it is not), or
    None (nothing)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        named = _names(left, name) and _is_none(right) or _names(right, name) and _is_none(left)
        if named and isinstance(test.ops[0], (ast.Is, ast.Eq)):
            return True
        if named and isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
            return False
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if _names(test.operand, name):
            return True  # not x: x may be None
        return _negated(test.operand, name)
    if _names(test, name) or _is_tensor_test(test, name):
        return False  # if x: / if isinstance(x, torch.Tensor): not None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        said = [_none_test(v, name) for v in test.values]
        return True if True in said else False if False in said else None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        said = [_none_test(v, name) for v in test.values]
        return True if said and all(s is True for s in said) else None
    return None


def _negated(test: ast.AST, name: str) -> bool | None:
    """What ``test`` being false says of ``name``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        said = [_negated(v, name) for v in test.values]  # every part false
        return False if False in said else True if True in said else None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        said = [_negated(v, name) for v in test.values]
        return said[0] if len(said) == 1 else None
    if _names(test, name) or _is_tensor_test(test, name):
        return True  # else of if x: / of isinstance(x, Tensor): None or no tensor
    plain = _none_test(test, name)
    return None if plain is None else not plain


def _is_tensor_test(test: ast.AST, name: str) -> bool:
    """``isinstance(x, torch.Tensor)`` (or a tuple of types holding ``Tensor``)."""
    if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name)):
        return False
    if test.func.id != "isinstance" or len(test.args) != 2 or not _names(test.args[0], name):
        return False
    kinds = test.args[1]
    named = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return any(
        (k.attr if isinstance(k, ast.Attribute) else getattr(k, "id", "")) == "Tensor"
        for k in named
    )


def _names(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _said_by_tests(name: str, node: ast.AST, parents: dict[int, ast.AST]) -> bool | None:
    """True where a test around ``node`` says ``name`` is not None, False where one says it
    is None, None where none says."""
    child, parent = node, parents.get(id(node))
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        said = None
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            inside = any(child is b for b in body)
            said = _none_test(parent.test, name) if inside else _negated(parent.test, name)
        if said is not None:
            return not said
        child, parent = parent, parents.get(id(parent))
    return None


def _settled_before(name: str, node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether a statement before ``node`` (in its block or a block around it) makes
    ``name`` not None: a rebinding to another value, ``assert name is not None``, or ``if
    name is None:`` whose body rebinds it or ends the path."""
    child, parent = node, parents.get(id(node))
    while parent is not None:
        for block in ("body", "orelse", "finalbody"):
            stmts = getattr(parent, block, None)
            if not isinstance(stmts, list) or not any(s is child for s in stmts):
                continue
            for stmt in reversed(stmts[: next(i for i, s in enumerate(stmts) if s is child)]):
                settled = _settles(stmt, name)
                if settled is not None:
                    return settled
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        child, parent = parent, parents.get(id(parent))
    return False


def _settles(stmt: ast.stmt, name: str) -> bool | None:
    """What ``stmt`` says of ``name`` after it: True (not None), False (None), None."""
    if isinstance(stmt, ast.Assign) and any(_names(t, name) for t in stmt.targets):
        return not _is_none(stmt.value)
    if isinstance(stmt, ast.Assert):
        said = _none_test(stmt.test, name)
        return None if said is None else not said
    if isinstance(stmt, ast.If) and _none_test(stmt.test, name) is True and not stmt.orelse:
        last = stmt.body[-1] if stmt.body else None
        rebound = any(
            isinstance(s, ast.Assign)
            and any(_names(t, name) for t in s.targets)
            and not _is_none(s.value)
            for s in stmt.body
        )
        return True if rebound or isinstance(last, _ENDS) else None
    return None


def template_at(node: ast.AST, ctx: Context) -> str | None:
    """The fallback fix template (:attr:`.Context.template`) when a fix at ``node`` may read
    it, else None."""
    template = ctx.template
    return template if template is not None and usable(template, node, ctx) else None
