"""Whether a rebinding of a name ends the walk of the value it held before.

``a = torch.empty(0)`` then ``if self.ebc is not None: a = self.ebc(f)`` rebinds ``a``
only when the branch runs: after the ``if``, ``a`` may still hold the placeholder, so its
later uses still read it. A rebinding ends the walk when it always runs after the binding:
in the same block, or in an ``if`` whose every branch binds the name (the walk then ends
after that ``if``). A conditional rebinding that reads the name's values (``if t.dtype !=
h.dtype: t = t.to(h.dtype)``) ends it too: the guard says the old value is not wanted; one
that reads only its device or shape (``t = torch.tensor(0.0, device=t.device)``) does not,
nor does one that neither casts nor sits under a dtype test (``if isinstance(s, list): s =
s[0].abs().max()``: other inputs keep the old value).

A value returned inside a branch chosen by its own rank (``if len(mask.shape) == 4: return
mask``) is returned so for some callers' tensors and not others: a leak seen only on that
path is not reported (a shared mask builder returns a 4-D mask as it is and casts a 2-D
one).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.nodes import walk

Position = tuple[int, int]


def rebinding_end(
    parents: dict[int, ast.AST], owner: ast.AST, stmt: ast.AST, name: str
) -> Position | tuple[Position, Position]:
    """Where the walk of ``name`` bound at ``stmt`` ends, given the rebinding statement
    ``owner``: its end, or the end of the ``if`` all of whose branches bind the name; when
    the rebinding may not run, the span it hides instead (from it to the end of its block,
    where the name holds the new value), and the walk goes on after that span."""
    branch = _conditional(parents, owner, stmt)
    if branch is None or _reads(owner, name, parents) and _cast_guard(owner, branch):
        return _end(owner)
    if _always_binds(branch.body, name, parents) and _always_binds(branch.orelse, name, parents):
        return _end(branch)
    block = parents.get(id(owner))
    ends = [_end(s) for s in _block_of(block, owner)] if block is not None else []
    return (_end(owner), max(ends, default=_end(owner)))


def _block_of(parent: ast.AST, owner: ast.AST) -> list[ast.stmt]:
    """The statement list of ``parent`` that holds ``owner``."""
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(parent, field, None)
        if isinstance(stmts, list) and any(s is owner for s in stmts):
            return stmts
    return []


def _conditional(parents: dict[int, ast.AST], owner: ast.AST, stmt: ast.AST) -> ast.If | None:
    """The outermost ``if`` around ``owner`` (``owner`` in a branch) that does not hold
    ``stmt``; None when every ``if`` around ``owner`` holds ``stmt`` too."""
    found: ast.If | None = None
    node = owner
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, ast.If) and node is not parent.test and not _holds(parent, stmt):
            found = parent
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        node = parent
    return found


def _holds(outer: ast.AST, inner: ast.AST) -> bool:
    start = (outer.lineno, outer.col_offset)  # type: ignore[attr-defined]
    where = (getattr(inner, "lineno", 0), getattr(inner, "col_offset", 0))
    return start <= where <= _end(outer)


def _end(node: ast.AST) -> Position:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _reads(owner: ast.AST, name: str, parents: dict[int, ast.AST]) -> bool:
    """``t = t.to(h.dtype)``: the rebinding reads the values of the name it binds; a read
    of its metadata only (``t = torch.tensor(0.0, device=t.device)``) is a new value."""
    for n in walk(owner):
        if not (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)):
            continue
        parent = parents.get(id(n))
        if not (isinstance(parent, ast.Attribute) and parent.attr in _METADATA):
            return True
    return False


def _cast_guard(owner: ast.AST, branch: ast.If) -> bool:
    """``if t.dtype != h.dtype: t = t.to(h.dtype)``: a rebinding that casts, or one under a
    test of a dtype. ``if isinstance(s, list): s = s[0].abs().max()`` picks another value
    for some inputs only: the old one may still be there after the ``if``."""
    calls = (n.func for n in walk(owner) if isinstance(n, ast.Call))
    if any(isinstance(f, ast.Attribute) and f.attr in _CASTS for f in calls):
        return True
    return any(isinstance(n, ast.Attribute) and n.attr == "dtype" for n in walk(branch.test))


_CASTS = frozenset({"to", "type_as", "type", "half", "bfloat16", "float", "double"})
_METADATA = frozenset({"device", "dtype", "shape", "ndim", "is_cuda"})


def _always_binds(body: list[ast.stmt], name: str, parents: dict[int, ast.AST]) -> bool:
    """Whether running ``body`` always binds ``name`` to a new value (or leaves the
    function). ``acc += x`` and ``acc = acc + x`` keep the old value in the new one: after
    ``if c: acc += x`` / ``else: acc = x``, ``acc`` may still be the fp32 accumulator."""
    for s in body:
        if isinstance(s, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
            return True
        if isinstance(s, (ast.Assign, ast.AnnAssign)) and not (
            s.value is not None and _reads(s.value, name, parents)
        ):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in walk(t)):
                return True
        if (
            isinstance(s, ast.If)
            and _always_binds(s.body, name, parents)
            and _always_binds(s.orelse, name, parents)
        ):
            return True
    return False


def rank_guarded(parents: dict[int, ast.AST], use: ast.AST, name: str, bound_at: ast.AST) -> bool:
    """Whether ``use`` is returned in a branch of an ``if`` whose
    test reads the rank of ``name`` (``x.ndim``, ``x.dim()``, ``len(x.shape)``), an ``if``
    after ``bound_at``: which branch runs depends on the tensor the caller passes. A value
    rebound there (``if x.dim() == 3: x = x.unsqueeze(2)``) goes on after the ``if`` on
    every path, and one returned changed (``return x[:, 0]``) is that function's result for
    every rank: only the name returned as it is counts (alone or in a tuple)."""
    node = parents.get(id(use))
    if isinstance(node, ast.Tuple):
        node = parents.get(id(node))
    if not isinstance(node, ast.Return):
        return False
    node = use
    while id(node) in parents:
        parent = parents[id(node)]
        test = parent.test if isinstance(parent, ast.If) and node is not parent.test else None
        if test is not None and not _holds(parent, bound_at) and _reads_rank(test, name, parents):
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        node = parent
    return False


def needs_rank(parents: dict[int, ast.AST], use: ast.AST, name: str, bound_at: ast.AST) -> bool:
    """Whether ``use`` runs only when ``name`` has dimensions: in the body of an ``if``
    after ``bound_at`` whose test is ``name.ndim > 0`` (``>= k``, ``== k``, ``!= 0`` with
    k >= 1; ``name.dim()``, ``len(name.shape)`` alike). A 0-dim placeholder
    (``gamma = torch.tensor(0.0)`` when none is given) read only for its rank never gets
    there."""
    node = use
    while id(node) in parents:
        parent = parents[id(node)]
        in_body = isinstance(parent, ast.If) and any(s is node for s in parent.body)
        if in_body and _ranked_if(parent, bound_at, name, parents):
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        node = parent
    return False


def _ranked_if(branch: ast.AST, bound_at: ast.AST, name: str, parents: dict[int, ast.AST]) -> bool:
    """An ``if`` after ``bound_at`` whose test no 0-dim ``name`` passes."""
    assert isinstance(branch, ast.If)
    return not _holds(branch, bound_at) and _positive_rank(branch.test, name, parents)


def _positive_rank(test: ast.AST, name: str, parents: dict[int, ast.AST]) -> bool:
    """``name.ndim > 0`` and the like: a test no 0-dim value passes."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if not (isinstance(right, ast.Constant) and type(right.value) is int):
        return False
    if not _reads_rank(left, name, parents):
        return False
    k = right.value
    if isinstance(op, ast.Gt):
        return k >= 0
    if isinstance(op, ast.NotEq):
        return k == 0
    return isinstance(op, (ast.GtE, ast.Eq)) and k >= 1


def _reads_rank(test: ast.AST, name: str, parents: dict[int, ast.AST]) -> bool:
    """Whether ``test`` reads the rank of ``name``."""
    for n in walk(test):
        if not (isinstance(n, ast.Name) and n.id == name):
            continue
        up = parents.get(id(n))
        if isinstance(up, ast.Attribute) and up.attr in ("ndim", "dim", "ndimension"):
            return True
        if isinstance(up, ast.Attribute) and up.attr in ("shape", "size"):
            outer = parents.get(id(up))
            if isinstance(outer, ast.Call) and outer.func is up:  # x.size()
                outer = parents.get(id(outer))
            if (
                isinstance(outer, ast.Call)
                and isinstance(outer.func, ast.Name)
                and outer.func.id == "len"
            ):
                return True
    return False
