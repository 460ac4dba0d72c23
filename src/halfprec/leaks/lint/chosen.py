"""Methods chosen at run time (see :mod:`.reach`): a call whose callee is a name or an
attribute bound to a bound method, not spelled at the call.

``f = self._a if cond else self._b; f(x, t=t)``, ``if c: f = self._a / else: f =
Cls.helper``, ``self.loss = self._kl if kd else self._ce`` in ``__init__`` and
``self.loss(h, t)`` in ``forward``, ``fns = {"a": self._a, "b": self._b}; fns[k](h, t)``,
``for fn in (self._a, self._b): fn(h, t)``:
each method the binding may hold is a callee, and a tensor handed to the call is followed
into every one of them (one path that meets half is a leak). A binding to anything else
(a module, a call's result) leaves the call to the other rules.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.memo import run_dict
from halfprec.leaks.lint.nodes import walk

_MAX_CHOICES = 8


def _alternatives(value: ast.AST) -> list[ast.expr]:
    """The callables ``value`` may be: both branches of ``a if c else b``, every value of a
    dict display, ``value`` itself for ``self.m``/``Cls.m``/``name``."""
    if isinstance(value, ast.IfExp):
        return _alternatives(value.body) + _alternatives(value.orelse)
    if isinstance(value, ast.Dict):
        return [v for item in value.values for v in _alternatives(item)]
    if isinstance(value, (ast.Attribute, ast.Name)):
        return [value]
    return []


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == "self" else None
    return None


def _local_values(name: str, ctx: Context) -> list[ast.expr]:
    """The values the walked function binds the local ``name`` to: ``name = v``, and the
    items of a tuple or list display ``for name in (a, b)`` takes (read from its name index,
    no walk)."""
    out: list[ast.expr] = []
    for node in ctx.names(name):
        if not isinstance(node.ctx, ast.Store):
            continue
        owner = ctx.parents.get(id(node))
        if isinstance(owner, ast.Assign) and owner.targets == [node]:
            out.append(owner.value)
        elif isinstance(owner, ast.For) and owner.target is node:
            if isinstance(owner.iter, (ast.Tuple, ast.List)):
                out.extend(owner.iter.elts)  # for fn in (self._a, self._b): either
            else:
                return []  # for fn in fns: items the lint does not see
    return out


def _attr_values(attr: str, cls: ast.ClassDef) -> list[ast.expr]:
    """The values the methods of ``cls`` assign to ``self.<attr>`` (the class is walked once,
    for every attribute)."""
    held = _ASSIGNED.get(id(cls))
    if held is None or held[0] is not cls:
        found: dict[str, list[ast.expr]] = {}
        for node in walk(cls):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                name = _self_attr(node.targets[0])
                if name is not None:
                    found.setdefault(name, []).append(node.value)
        if len(_ASSIGNED) > 256:
            _ASSIGNED.clear()
        held = _ASSIGNED[id(cls)] = (cls, found)
    return held[1].get(attr, [])


_ASSIGNED = run_dict(dict[int, tuple[ast.ClassDef, dict[str, list[ast.expr]]]])


def choices(func: ast.AST, ctx: Context, cls: ast.ClassDef | None) -> list[ast.expr]:
    """The callables a call of ``func`` may run when ``func`` is a local name of the walked
    function, a ``self`` attribute of class ``cls``, or a subscript of one of them, bound to
    bound methods or functions (see the module docstring); empty otherwise."""
    if isinstance(func, ast.Subscript):
        func = func.value  # fns[k](h): whichever value of the dict
    attr_name = _self_attr(func)
    if isinstance(func, ast.Name) and ctx.function is not None:
        values = _local_values(func.id, ctx)
    elif attr_name is not None and cls is not None:
        values = _attr_values(attr_name, cls)
    else:
        return []
    attr = _self_attr(func) is not None
    out: list[ast.expr] = []
    for value in values:
        if isinstance(value, ast.Constant) and value.value is None:
            continue  # f = None before the choice: never called as such
        alts = _alternatives(value)
        if not alts:
            return []  # also a module or a call's result: the call is judged as before
        if attr and any(isinstance(a, ast.Name) for a in alts):
            return []  # self.f = a_function: a callable attribute, judged as before
        for alt in alts:
            if isinstance(alt, ast.Name) and isinstance(func, ast.Name) and alt.id == func.id:
                continue  # f = f: no method
            if ast.dump(alt) != ast.dump(func):
                out.append(alt)
    return out[:_MAX_CHOICES]
