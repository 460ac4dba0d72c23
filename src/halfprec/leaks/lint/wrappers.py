"""Where a followed tensor goes when it is wrapped as module state at call time.

``model.half()`` converts the parameters and buffers a module holds when it is called; one
made later, in ``forward`` or a helper of it (an explainer's mask, a cache), keeps the
dtype of the tensor it wraps. So ``self.mask = nn.Parameter(torch.randn(n, 1))`` in a
helper of ``forward`` holds an fp32 tensor, and ``x * self.mask.sigmoid()`` meets half
with it. :func:`wrapped` follows the tensor through such a wrapper:

- ``nn.Parameter(t)``, ``Parameter(t)``, ``nn.Buffer(t)``: the same values, so the walk
  goes on with the wrapper's value; so does ``Variable(t)`` (``torch.autograd``'s old
  wrapper, which returns the tensor itself, in ``__init__`` too);
- ``self.register_buffer("mask", t)``, ``self.register_parameter("mask", p)``,
  ``setattr(self, "mask", t)``: kept as ``self.mask``, followed at its reads.

In ``__init__`` (a helper's table handed back to the constructor) the state is made before
the conversion, which converts it: there the walk ends well.

The scatter and segment reductions of graph libraries (``scatter(t, index, reduce="sum")``
of ``torch_scatter`` or ``torch_geometric.utils``, ``segment_csr(t, ptr)``) hand on their
first input's dtype the same way: the walk goes on with their value.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import dotted, words
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Follow, to_readers

_WRAPPERS = words("Parameter Buffer")
_REGISTERS = words("register_buffer register_parameter")
_REDUCERS = words(
    "scatter scatter_sum scatter_add scatter_mean scatter_max scatter_min scatter_mul "
    "segment_csr segment_coo segment_sum_csr segment_sum_coo"
)


def wrapped(f: Follow, node: ast.AST, call: ast.Call) -> str | None:
    """The step for ``node`` (the tensor, or its ``data=`` keyword) passed to ``call``
    when ``call`` wraps it as module state; None when it does not."""
    name = dotted(call.func)
    last = name.rsplit(".", 1)[-1]
    value = node.value if isinstance(node, ast.keyword) else node
    if last == "Variable" and _first(call, value, "data"):
        return "up"  # Variable(torch.zeros(n), requires_grad=...): t itself
    if (last in _WRAPPERS | _REGISTERS or name == "setattr") and _constructor(f):
        return "safe"  # state made in __init__ is converted with the model
    if last in _WRAPPERS and _first(call, value, "data"):
        return "up"
    if last in _REDUCERS and _library(call.func) and _first(call, value, "src"):
        return "up"  # scatter(t, index, reduce="sum"): t's values reduced, in t's dtype
    if last in _REGISTERS and isinstance(call.func, ast.Attribute):
        if not _first(call, value, "tensor", "param", at=1):
            return None
        return _kept(f, call.func.value, call.args[0] if call.args else None, call)
    if name == "setattr" and len(call.args) == 3 and call.args[2] is value:
        return _kept(f, call.args[0], call.args[1], call)
    return None


def dict_attribute(f: Follow, holder: ast.AST) -> bool:
    """Whether ``holder`` is ``self.X`` that some method of the class binds to a dict
    (``self.masks = {}``): ``self.masks[k] = t`` stores into the dict, even where the class
    also binds ``self.masks`` to a tensor in another mode."""
    calls, fn = f.ctx.calls, f.ctx.function
    if not (isinstance(holder, ast.Attribute) and dotted(holder.value) == "self"):
        return False
    if calls is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    owner = calls.program.owner_of(fn)
    cls = calls.program.classes.get(owner) if owner else None
    for n in walk(cls) if cls is not None else ():
        if not isinstance(n, ast.Assign) or not _a_dict(n.value):
            continue
        if any(isinstance(t, ast.Attribute) and t.attr == holder.attr for t in n.targets):
            return True
    return False


def _a_dict(value: ast.AST) -> bool:
    if isinstance(value, (ast.Dict, ast.DictComp)):
        return True
    return isinstance(value, ast.Call) and dotted(value.func).rsplit(".", 1)[-1] in _DICTS


_DICTS = words("dict defaultdict OrderedDict ParameterDict")


def _constructor(f: Follow) -> bool:
    fn = f.ctx.function
    return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == "__init__"


def _library(func: ast.AST) -> bool:
    """``scatter`` or ``torch_scatter.scatter``: a function of a graph library, not
    ``torch.scatter`` or a tensor's own ``h.scatter_add(dim, index, src)``."""
    root = dotted(func).split(".")[0]
    return isinstance(func, ast.Name) or root in _LIBRARIES


_LIBRARIES = words("torch_scatter torch_geometric pyg pyg_lib utils")


def _first(call: ast.Call, value: ast.AST, *names: str, at: int = 0) -> bool:
    """Whether ``value`` is the positional argument ``at`` of ``call`` or its keyword
    among ``names``."""
    if len(call.args) > at and call.args[at] is value:
        return True
    return any(k.arg in names and k.value is value for k in call.keywords)


def _kept(f: Follow, holder: ast.AST, key: ast.AST | None, call: ast.Call) -> str:
    """``self.register_buffer("mask", t)``: follow ``t`` at the reads of ``self.mask``."""
    if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
        return "unknown"
    if not isinstance(holder, ast.Name):
        return "unknown"  # setattr(ctx, "offset", t) of a name: read as ctx.offset
    target = ast.Attribute(value=holder, attr=key.value, ctx=ast.Store())
    ast.copy_location(target, call)
    return "done" if to_readers(f, target) else "unknown"
