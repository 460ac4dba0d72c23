"""A module the model holds, called only on fp32 the library asks for (see :mod:`.asked`).

``k = self.kernel(y, y)`` of ``y = x.float()`` is fp32 in a half model whatever the module
is: a layer with half weights raises on the fp32 input (``mixed dtype``, checked with torch
2.13 for linear, convolution and normalization layers), one without weights computes in its
inputs' dtype, and half parameters met in arithmetic (``x * self.scale``) promote to fp32.
So a factory's tensor that meets ``k`` (``k + eps * torch.eye(n)``) carries no fp32 of its
own: made half, it would leave the result fp32 all the same.

Only where every input is such a value (or a Python constant), no keyword passes a
tensor, and the module is one of two kinds:

- of a class of this file that holds no tensor and no layer (a kernel, a distance) and whose
  ``forward``/``__call__`` casts to no other tensor's dtype (``.to(self.weight.dtype)``,
  ``.type_as(w)``, ``.half()`` may hand back half);
- handed in to ``__init__`` (``self.k = kernel(T=t)`` of a parameter ``kernel``): its class is
  the caller's, which the file cannot see.

A layer with weights of torch or another library (``nn.Sequential(nn.Linear(...), ...)``) is
not taken: its output is judged the model's dtype, as before.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.explicit import helper_returns, through
from halfprec.leaks.lint.nodes import walk

Judge = Callable[[ast.AST, Context, int], bool]
_CALLED = words("forward __call__")
_TO_HALF = words("half bfloat16 type_as")
_REARRANGES = words("rearrange einops.rearrange")


def fed_asked(call: ast.Call, ctx: Context, judge: Judge, depth: int) -> bool:
    """Whether ``call`` runs a module the model holds (``self.<attr>(...)``) on inputs that
    ``judge`` accepts as fp32 asked for, or constants (see the module docstring)."""
    func = call.func
    if not isinstance(func, ast.Attribute) or dotted(func.value) != "self":
        return False
    layer = dict(ctx.facts.layers).get(func.attr)
    if layer is None or not (_weightless(layer, ctx) or _handed_in(layer, ctx)):
        return False
    if any(not isinstance(k.value, ast.Constant) for k in call.keywords):
        return False
    if any(isinstance(a, ast.Starred) for a in call.args):
        return False
    tensors = [a for a in call.args if not isinstance(a, ast.Constant)]
    return bool(tensors) and all(judge(a, ctx, depth + 1) for a in tensors)


def _weightless(layer: str, ctx: Context) -> bool:
    """Whether ``layer`` is a class of this file holding no tensor and no layer, whose
    ``forward``/``__call__`` casts to no other tensor's dtype."""
    found = ctx.calls.program.methods_of(layer) if ctx.calls is not None else None
    if found is None:
        return False
    methods, facts = found
    if facts.tensors or facts.layers or facts.elements or facts.module_classes:
        return False
    called = [fn for name, fn in methods.items() if name in _CALLED]
    return bool(called) and not any(_casts_back(fn) for fn in called)


def _handed_in(layer: str, ctx: Context) -> bool:
    """Whether ``layer`` names a parameter of the ``__init__`` of the class whose method is
    walked: the module's class is the caller's."""
    calls, fn = ctx.calls, ctx.function
    if calls is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    owner = calls.program.owner_of(fn)
    found = calls.program.methods_of(owner) if owner else None
    init = found[0].get("__init__") if found is not None else None
    if init is None:
        return False
    a = init.args
    return any(p.arg == layer for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))


def _casts_back(fn: ast.AST) -> bool:
    """Whether ``fn`` casts to a dtype other than fp32."""
    for node in walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _TO_HALF:
                return True
            if node.func.attr in ("to", "type") and _names_dtype(node):
                return True
    return False


def _names_dtype(call: ast.Call) -> bool:
    """``t.to(w.dtype)``, ``t.to(dtype=d)``, ``t.to(w)``: a dtype the call does not fix."""
    values = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
    for v in values:
        text = dotted(v)
        if text.endswith("float32") or text.endswith("float") or text.endswith("device"):
            continue
        if text.endswith("dtype") or isinstance(v, ast.Name):
            return True
    return False


def handed_through(call: ast.Call, ctx: Context, judge: Judge, depth: int) -> bool:
    """Whether ``call`` runs a same-file helper whose every ``return`` hands back one of its
    parameters, only rearranged (``return rearrange(x, "b d h w -> b (h w) d")``), and the
    argument this call passes for it is one ``judge`` accepts: ``self.flat(y.float())`` is
    the fp32 asked for at this call, whatever other calls pass."""
    returned = helper_returns(call, ctx)
    if not returned:
        return False
    for value, there in returned:
        fn = there.function
        name = _unrearranged(value, there)
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or name is None:
            return False
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        param = next((p for p in params if p.arg == name.id), None)
        if param is None or any(isinstance(n.ctx, ast.Store) for n in there.names(name.id)):
            return False
        method = bool(a.args) and a.args[0].arg == "self"
        arg = argument_for(fn, call, param, method)
        if arg is None or not judge(arg, ctx, depth + 1):
            return False
    return True


def _unrearranged(value: ast.AST, ctx: Context) -> ast.Name | None:
    """The name under reshapes and einops' ``rearrange`` (``rearrange(x, "...")``)."""
    for _ in range(8):
        value = through(value, ctx)
        if isinstance(value, ast.Call) and dotted(value.func) in _REARRANGES and value.args:
            value = value.args[0]
        else:
            break
    return value if isinstance(value, ast.Name) else None
