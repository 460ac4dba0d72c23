"""Dtypes the code decides beyond one expression (see :mod:`.nothalf`, HP302).

- *A checked dtype*: after ``if t.dtype != torch.float32: raise ...`` (alone or in an
  ``or`` of tests; also ``not in (torch.float32, torch.float64)``, ``assert t.dtype ==
  torch.float32``), ``t`` is fp32 or fp64 where it is read later in the function.
- *A parameter is what its callers pass*: a parameter of a function (not a module's
  ``forward``) holds what every call of it the lint sees passes: the calls of the file, the
  calls another file's forward path makes (:mod:`.elsewhere`), and ``Cls.apply(...)`` of a
  ``torch.autograd.Function`` (whose ``forward`` takes ``ctx`` first). With no call seen,
  the caller may pass half.
  A parameter annotated ``int``, ``float`` or ``bool`` is a Python number.
- *A returned value*: ``a, b = helper(...)`` of a function of the file or of another file
  of the tree holds what ``helper``'s ``return`` expressions hold (element by element).
- *A tuple target*: ``lo, hi = a.gather(...), b.gather(...)`` binds each name its element.

Decided by what the code does to the values, never by names.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.casts import FP32_NAMES
from halfprec.leaks.lint.classes import NO_FACTS
from halfprec.leaks.lint.context import Calls, Context, dotted
from halfprec.leaks.lint.memo import run_dict
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.scope import Function

Judge = Callable[[ast.AST, Context, int], bool]
_NUMBERS = frozenset({"int", "float", "bool"})


def _wide_dtype(node: ast.AST, ctx: Context) -> bool:
    return ctx.is_torch_attr(node, *FP32_NAMES) is not None


def _checks(test: ast.AST, name: str, ctx: Context, raising: bool) -> bool:
    """Whether ``test`` (true: the code raises when ``raising``, else it goes on) says
    ``name``'s dtype is fp32/fp64."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or if raising else ast.And):
        return any(_checks(v, name, ctx, raising) for v in test.values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if not (
        isinstance(left, ast.Attribute) and left.attr == "dtype" and dotted(left.value) == name
    ):
        return False
    if isinstance(op, ast.NotEq if raising else ast.Eq):
        return _wide_dtype(right, ctx)
    if isinstance(op, ast.NotIn if raising else ast.In) and isinstance(
        right, (ast.Tuple, ast.List, ast.Set)
    ):
        return bool(right.elts) and all(_wide_dtype(e, ctx) for e in right.elts)
    return False


def checked(use: ast.Name, ctx: Context, since: tuple[int, int]) -> bool:
    """Whether a dtype check of ``use``'s name between ``since`` and ``use`` proves it
    fp32/fp64 (see the module docstring)."""
    fn = ctx.function
    if fn is None:
        return False
    where = (use.lineno, use.col_offset)
    for at, node in _guards(fn, ctx):
        if not since <= at < where:
            continue
        if isinstance(node, ast.If) and _checks(node.test, use.id, ctx, raising=True):
            return True
        if isinstance(node, ast.Assert) and _checks(node.test, use.id, ctx, raising=False):
            return True
    return False


_GUARDS = run_dict(dict[int, tuple[ast.AST, list[tuple[tuple[int, int], ast.stmt]]]])


def _guards(fn: ast.AST, ctx: Context) -> list[tuple[tuple[int, int], ast.stmt]]:
    """The ``if ...: raise`` and ``assert`` statements of ``fn`` with their positions (found
    once per function; none without a ``.dtype`` in its text)."""
    held = _GUARDS.get(id(fn))
    if held is not None and held[0] is fn:
        return held[1]
    found: list[tuple[tuple[int, int], ast.stmt]] = []
    if _has_dtype_test(fn, ctx):
        for node in walk(fn):
            if isinstance(node, ast.Assert) or (
                isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body)
            ):
                found.append(((node.lineno, node.col_offset), node))
    if len(_GUARDS) > 512:
        _GUARDS.clear()
    _GUARDS[id(fn)] = (fn, found)
    return found


def _has_dtype_test(fn: ast.AST, ctx: Context) -> bool:
    """Whether ``fn``'s text reads a ``.dtype`` (read from the lines: no walk)."""
    first, last = getattr(fn, "lineno", 1), getattr(fn, "end_lineno", None) or 1
    return any(".dtype" in line for line in ctx.lines[first - 1 : last])


def binding_of(use: ast.Name, ctx: Context) -> tuple[ast.AST | None, int | None, tuple[int, int]]:
    """The value last assigned to ``use``'s name before ``use``, the position of the name in
    a tuple target whose value is no display (``a, b = f()``: 1 for ``b``), and where it was
    bound ((0, 0) for a parameter)."""
    where = (use.lineno, use.col_offset)
    here = ctx.statement_of(use)
    found: tuple[ast.AST | None, int | None, tuple[int, int]] = (None, None, (0, 0))
    for node in ctx.names(use.id):
        if (node.lineno, node.col_offset) >= where:
            break
        if not isinstance(node.ctx, ast.Store):
            continue
        owner = ctx.statement_of(node)
        if owner is here or not isinstance(owner, ast.Assign) or len(owner.targets) != 1:
            continue
        at = (node.lineno, node.col_offset)
        if at < found[2]:
            continue
        target, value = owner.targets[0], owner.value
        if target is node:
            found = (value, None, at)
        elif isinstance(target, ast.Tuple) and node in target.elts:
            i = target.elts.index(node)
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                found = (value.elts[i], None, at)
            else:
                found = (value, i, at)
    return found


def returned(call: ast.Call, index: int | None, ctx: Context, judge: Judge, depth: int) -> bool:
    """Whether every ``return`` of the function ``call`` runs (of this file or another of
    the tree) hands back, as element ``index`` (or whole), a value ``judge`` accepts."""
    calls = ctx.calls
    func = call.func
    if calls is None or not isinstance(func, ast.Name):
        return False
    fn = calls.program.functions.get(func.id)
    there: Calls = calls
    if fn is None:
        found = calls.function(func.id) if calls.function is not None else None
        if found is None:
            return False
        there, fn = found
    returns = there.returns(fn)
    inner = there.context(fn, NO_FACTS, False)
    _CALLING.append((fn, call, ctx))  # its parameters hold what this call passes
    try:
        for value in returns:
            for part in _element(value, index):
                if not judge(part, inner.at(part), depth + 1):
                    return False
    finally:
        _CALLING.pop()
    return bool(returns)


def _element(value: ast.expr, index: int | None) -> list[ast.expr]:
    """What element ``index`` of a returned ``value`` may be: that element of a tuple
    display; of one with a ``*`` in it, or of another value, any of it (judged whole)."""
    if index is None or not isinstance(value, ast.Tuple):
        return [value]
    if any(isinstance(e, ast.Starred) for e in value.elts):
        return [e.value if isinstance(e, ast.Starred) else e for e in value.elts]
    return [value.elts[index]] if index < len(value.elts) else [value]


# the calls whose helpers' returns are being judged, innermost last: a parameter of such
# a helper holds what that call passes (one call, not every call of the helper)
_CALLING: list[tuple[Function, ast.Call, Context]] = []


def passed(use: ast.Name, ctx: Context, judge: Judge, depth: int) -> bool:
    """Whether ``use`` reads a parameter of its function that every call the lint sees
    passes a value ``judge`` accepts (see the module docstring)."""
    fn, calls = ctx.function, ctx.calls
    if calls is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    param = next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == use.id), None)
    if param is None:
        return False
    if isinstance(param.annotation, ast.Name) and param.annotation.id in _NUMBERS:
        return True  # duration: float: a Python number by its signature
    owner = calls.program.owner_of(fn)
    static = any(dotted(d) == "staticmethod" for d in fn.decorator_list)
    sites: list[tuple[ast.Call, Context, bool]] = []
    calling = next(((c, where) for f, c, where in reversed(_CALLING) if f is fn), None)
    if calling is not None:
        sites = [(calling[0], calling[1], False)]
    elif owner is not None and fn.name == "forward" and _autograd(calls, owner):
        sites = [(c, where, True) for c, where in _applied(calls, owner)]
    elif fn.name != "forward":
        method = owner is not None and not static
        for site in calls.callers(fn):
            where = calls.context(site.caller, site.facts, site.is_forward)
            sites.append((site.call, where, method))
        sites += [(c, where, method) for c, where in calls.outside.get(id(fn), ())]
    if not sites:
        return False
    for call, where, method in sites:
        arg = argument_for(fn, call, param, method)
        if arg is None or not judge(arg, where.at(call), depth + 1):
            return False
    return True


def _autograd(calls: Calls, owner: str) -> bool:
    cls = calls.program.classes.get(owner)
    return cls is not None and any(dotted(b).endswith("Function") for b in cls.bases)


def _applied(calls: Calls, owner: str) -> list[tuple[ast.Call, Context]]:
    """Every ``owner.apply(...)`` in the file, with its function's walked context."""
    program = calls.program
    spelled = f"{owner}.apply"
    out: list[tuple[ast.Call, Context]] = []
    scopes: list[tuple[Function, str | None]] = [(f, None) for f in program.functions.values()]
    for name, cls in program.classes.items():
        scopes += [
            (m, name) for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
    for fn, cls_name in scopes:
        text = "\n".join(calls.lines[fn.lineno - 1 : fn.end_lineno or fn.lineno])
        if spelled not in text:
            continue
        info = program.methods_of(cls_name) if cls_name else None
        facts = info[1] if info is not None else NO_FACTS
        for node in walk(fn):
            if isinstance(node, ast.Call) and dotted(node.func) == spelled:
                out.append((node, calls.context(fn, facts, fn.name == "forward")))
    return out
