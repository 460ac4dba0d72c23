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

from halfprec.leaks.lint.nodes import walk

__all__ = ["choices"]

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


def _bound_in(scope: ast.AST, target: ast.AST) -> list[ast.expr]:
    """The values assigned to ``target`` (a name, or ``self.x``) anywhere in ``scope``, and
    the items of a tuple or list display a ``for`` loop binds a name to."""
    name = target.id if isinstance(target, ast.Name) else None
    attr = _self_attr(target)
    out: list[ast.expr] = []
    for node in walk(scope):
        if isinstance(node, ast.For) and isinstance(node.iter, (ast.Tuple, ast.List)):
            if name is not None and isinstance(node.target, ast.Name) and node.target.id == name:
                out.extend(node.iter.elts)  # for fn in (self._a, self._b): either
            continue
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        t = node.targets[0]
        if (
            name is not None
            and isinstance(t, ast.Name)
            and t.id == name
            or attr is not None
            and _self_attr(t) == attr
        ):
            out.append(node.value)
    return out


def choices(func: ast.AST, function: ast.AST | None, cls: ast.ClassDef | None) -> list[ast.expr]:
    """The callables a call of ``func`` may run when ``func`` is a local name of
    ``function``, a ``self`` attribute of class ``cls``, or a subscript of one of them,
    bound to bound methods or functions (see the module docstring); empty otherwise."""
    if isinstance(func, ast.Subscript):
        func = func.value  # fns[k](h): whichever value of the dict
    if isinstance(func, ast.Name) and function is not None:
        values = _bound_in(function, func)
    elif _self_attr(func) is not None and cls is not None:
        values = _bound_in(cls, func)
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
