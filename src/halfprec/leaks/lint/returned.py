"""What a method of the walked function's own class returns (see :mod:`.values`).

``out, c, h = self.step(x[:, t], c, h)`` where ``step`` feeds a submodule and returns
``out``: the names hold what ``step``'s ``return`` expressions hold, judged in ``step``
walked with the values this call passes to its parameters (a static method takes no
``self``). A method returning a tuple of the target's length gives each name its element;
a tuple target of another return (``a, b = self.route(h)`` of ``return self.picker(h)``)
is not known, element by element. One call deep per
method at a time (a method that calls itself is not read again). A method handed an
explicit upcast (``self._norm(x.float())``) returns what the lint does not judge.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.scope import Function

Judge = Callable[[ast.AST, Context], "bool | None"]
Value = bool | None


def _static(fn: Function) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def _method(call: ast.Call, ctx: Context) -> tuple[Function, Context] | None:
    """The method ``self.<name>(...)`` of the walked function's class, with its walk."""
    calls, function, func = ctx.calls, ctx.function, call.func
    if calls is None or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    if func.value.id != "self":
        return None
    owner = calls.program.owner_of(function)
    info = calls.program.methods_of(owner) if owner else None
    method = info[0].get(func.attr) if info is not None else None
    if info is None or method is None or id(method) in calls.busy:
        return None
    return method, info[1]  # type: ignore[return-value]


def is_method_call(call: ast.Call, ctx: Context) -> bool:
    """Whether ``call`` runs a method of the walked function's class, ``self.<name>(...)``."""
    return _method(call, ctx) is not None


def returned_values(call: ast.Call, ctx: Context, judge: Judge, count: int) -> list[Value] | None:
    """The values of the ``count`` elements each ``return`` of the method hands back (a
    tuple of that length), or of the whole value (``count`` 0); None when ``call`` is no
    method call of the class, or a return has another shape."""
    found = _method(call, ctx)
    calls = ctx.calls
    if found is None or calls is None:
        return None
    method, facts = found
    returns = calls.returns(method)
    if not returns:
        return None
    if count and not all(
        isinstance(r, ast.Tuple)
        and len(r.elts) == count
        and not any(isinstance(e, ast.Starred) for e in r.elts)
        for r in returns
    ):
        return None
    bound: dict[str, bool] = {}
    a = method.args
    bound_self = not _static(method)
    for param in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        arg = argument_for(method, call, param, bound_self)
        value = judge(arg, ctx) if arg is not None else None
        if value is None and arg is not None and ctx.is_upcast(arg):
            return None  # self._norm(x.float()): fp32 on purpose, whatever its name says
        if value is not None:
            bound[param.arg] = value
    calls.busy.add(id(method))
    try:
        inner = calls.given(method, bound, facts)  # type: ignore[arg-type]
        if count:
            per = [[judge(e, inner.at(e)) for e in r.elts] for r in returns]  # type: ignore[attr-defined]
            return [_join([p[i] for p in per]) for i in range(count)]
        return [_join([judge(r, inner.at(r)) for r in returns])]
    finally:
        calls.busy.discard(id(method))


def _join(values: list[Value]) -> Value:
    floating = [v for v in values if v is not None]
    if not floating or len(floating) < len(values):
        return None if not floating else False  # floating on some ways only: guessed
    return all(floating)
