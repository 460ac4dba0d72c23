"""Whether the argument of ``t.to(arg)`` is a device: a move keeps ``t``'s dtype, a cast
does not.

Decided from the data flow where the lint can see it:

- a device by its own shape: a string (``"cuda"``, ``"cuda:0"``) or an integer index,
  ``x.device`` (of anything: ``next(self.parameters()).device``), ``torch.device(...)``;
- a name bound before to a device (``dev = get_module_device(self)``), a parameter
  annotated ``torch.device`` or ``str``, or given a string default;
- a function of this file or of another file of the tree, or a method or property of the
  walked class, whose every ``return`` is a device (``return
  next(module.parameters()).device``); ``a if c else b`` of two devices.

Where the argument cannot be resolved (a helper of an installed package, an attribute of a
base class another library defines), the fallback reads its name: a name, attribute or
called function whose last part spells ``device`` (``get_module_device(self)``,
``self.device``, ``device``) is taken as a device. Anything else (a tensor, ``x.dtype``, a
dtype name, ``**kwargs``, an unknown name) stays a possible cast.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.scope import Function

_MAX_DEPTH = 4  # helpers followed, one returning another's value


def moves_only(call: ast.Call, ctx: Context) -> bool:
    """``t.to(...)`` that names only devices: no dtype, no tensor, no ``**kwargs``."""
    if any(k.arg is None for k in call.keywords):
        return False  # .to(**kwargs): may hold a dtype
    if any(k.arg == "dtype" for k in call.keywords):
        return False
    return all(is_device(a, ctx) for a in call.args)


def is_device(arg: ast.AST, ctx: Context, where: Function | None = None, depth: int = 0) -> bool:
    """Whether ``arg`` is a device (see the module docstring). ``where``: the function
    ``arg`` is written in, when it is not the walked one (a helper's ``return``)."""
    if depth > _MAX_DEPTH:
        return False
    here = where is None or where is ctx.function
    if isinstance(arg, ast.Constant):
        return isinstance(arg.value, str) or type(arg.value) is int
    if isinstance(arg, ast.IfExp):
        return all(is_device(a, ctx, where, depth + 1) for a in (arg.body, arg.orelse))
    if isinstance(arg, ast.Attribute):
        if arg.attr == "device":
            return True
        return here and _self_property(arg, ctx, depth) or _names_device(arg.attr)
    if isinstance(arg, ast.Name):
        return _name_device(arg, ctx, where, depth)
    if isinstance(arg, ast.Call):
        if ctx.is_torch_attr(arg.func, "device") is not None:
            return True
        found = _returned(arg.func, ctx, here)
        if found is not None and found[1]:
            return all(is_device(r, ctx, found[0], depth + 1) for r in found[1])
        func = arg.func
        last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return _names_device(last)  # t.get_device(), get_module_device(self) unseen
    return False


def _names_device(name: str) -> bool:
    """The fallback: ``device``, ``get_module_device``, ``self.device`` (not ``dtype``)."""
    return "device" in name.lower()


def _name_device(arg: ast.Name, ctx: Context, where: Function | None, depth: int) -> bool:
    fn = ctx.function if where is None else where
    if where is None or where is ctx.function:
        bound = [ctx.binding_before(arg)]
    else:
        bound = [_assigned(where, arg.id)]
    values = [b for b in bound if b is not None]
    if values:
        return all(is_device(v, ctx, where, depth + 1) for v in values)
    param = _parameter(fn, arg.id)
    if param is not None and _device_parameter(param, fn):
        return True
    return _names_device(arg.id)


def _assigned(fn: Function, name: str) -> ast.expr | None:
    """The value of the last ``name = ...`` in ``fn`` (a helper's own names)."""
    value = None
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and (value is None or node.lineno > value.lineno)
        ):
            value = node.value
    return value


def _parameter(fn: ast.AST | None, name: str) -> ast.arg | None:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = fn.args
    return next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == name), None)


def _device_parameter(param: ast.arg, fn: ast.AST | None) -> bool:
    """A parameter annotated ``torch.device`` or ``str`` (``Optional[...]`` too), or given a
    string default (``device="cuda"``)."""
    note = param.annotation
    if note is not None:
        spelled = {dotted(n).rsplit(".", 1)[-1] for n in ast.walk(note)}
        if spelled & {"device", "str"}:
            return True
    default = _default(fn, param)
    return isinstance(default, ast.Constant) and isinstance(default.value, str)


def _default(fn: ast.AST | None, param: ast.arg) -> ast.expr | None:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    if param in positional:
        offset = len(positional) - len(a.defaults)
        index = positional.index(param) - offset
        return a.defaults[index] if index >= 0 else None
    if param in a.kwonlyargs:
        return a.kw_defaults[a.kwonlyargs.index(param)]
    return None


def _returned(func: ast.AST, ctx: Context, here: bool) -> tuple[Function, list[ast.expr]] | None:
    """The function ``func`` names and what it returns: a function of this file or another
    file of the tree, or (``here``) a method of the walked class (``self.get_device()``);
    None when the lint cannot see it."""
    calls = ctx.calls
    if calls is None:
        return None
    if isinstance(func, ast.Name):
        fn = calls.program.functions.get(func.id)
        if fn is not None:
            return fn, calls.returns(fn)
        there = calls.function(func.id) if calls.function is not None else None
        return (there[1], there[0].returns(there[1])) if there is not None else None
    method = _method(func, ctx) if here else None
    return (method, calls.returns(method)) if method is not None else None


def _method(attr: ast.AST, ctx: Context) -> Function | None:
    """``self.<name>``: the method (or property) of the walked function's class."""
    calls, fn = ctx.calls, ctx.function
    if calls is None or not isinstance(attr, ast.Attribute) or dotted(attr.value) != "self":
        return None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    owner = calls.program.owner_of(fn)
    found = calls.program.methods_of(owner) if owner else None
    return found[0].get(attr.attr) if found is not None else None


def _self_property(attr: ast.Attribute, ctx: Context, depth: int) -> bool:
    """``self.dev`` of a ``@property`` of the class that returns a device."""
    method = _method(attr, ctx)
    if method is None or ctx.calls is None:
        return False
    if not any(dotted(d).rsplit(".", 1)[-1] == "property" for d in method.decorator_list):
        return False
    returned = ctx.calls.returns(method)
    return bool(returned) and all(is_device(r, ctx, method, depth + 1) for r in returned)
