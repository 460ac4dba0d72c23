"""A tensor given to a module made inside the walked function (see :mod:`.fate`).

``model.half()`` converts the modules a model holds; one built in ``forward`` itself
(``blur = GaussianBlur2d(k).to(x.device)``, ``nn.AvgPool2d(3)(t)``) is made after the
conversion, so its weights, if any, are fp32 and nothing in it is half. An fp32 tensor it is
called on comes out fp32, as a weightless layer hands it on: the walk goes on with the
call's value. A module cast to a dtype where it is made (``.to(x.dtype)``, ``.half()``) is
left to the other rules.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.reach import Follow

# a module's own methods that hand back the module, on its device, in its dtype
_SAME_MODULE = words("eval train requires_grad_ cpu cuda")


def made_module_step(f: Follow, node: ast.AST, call: ast.Call) -> str | None:
    """``"up"`` for ``t`` as the first input of a module made in this function; None when
    ``call`` runs no such module."""
    if not (call.args and call.args[0] is node):
        return None
    func = call.func
    made = f.ctx.binding_before(func) if isinstance(func, ast.Name) else func
    return "up" if made is not None and _made(made, f.ctx) else None


def _made(value: ast.AST, ctx: Context) -> bool:
    """``Cls(...)``, also through ``.to(device)``/``.eval()``: a module class's instance."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        method = value.func.attr
        if method == "to" and not _device_only(value):
            return False
        if method != "to" and method not in _SAME_MODULE:
            break
        value = value.func.value
    if not isinstance(value, ast.Call):
        return False
    name = dotted(value.func)
    last = name.rsplit(".", 1)[-1]
    return bool(last[:1].isupper()) and _module_class(name, last, ctx)


def _device_only(call: ast.Call) -> bool:
    """``.to(device)``, ``.to(x.device)``, ``.to("cuda")``: a move, no cast."""
    args = [*call.args, *(k.value for k in call.keywords if k.arg != "non_blocking")]
    return all(_a_device(a) for a in args)


def _a_device(arg: ast.AST) -> bool:
    """``"cuda"``, ``device``, ``x.device``, ``torch.device("cuda")``."""
    if isinstance(arg, ast.Constant):
        return isinstance(arg.value, str)
    if isinstance(arg, ast.Call):
        arg = arg.func
    name = arg.attr if isinstance(arg, ast.Attribute) else getattr(arg, "id", "")
    return "device" in name.lower()


def _module_class(name: str, last: str, ctx: Context) -> bool:
    """Whether ``name`` is an ``nn.Module`` class: a layer of ``torch.nn``, or a class with a
    ``forward`` that this file or another file of its package defines."""
    root = name.split(".", 1)[0]
    if root in ctx.imports.torch or root == "nn" and "." in name:
        return True
    calls = ctx.calls
    if calls is None or "." in name:
        return False
    local = calls.program.methods_of(last)
    if local is not None:
        return "forward" in local[0]
    return calls.other is not None and calls.other(last) is not None
