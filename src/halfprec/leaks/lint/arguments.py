"""A followed tensor passed to a call (see :mod:`.fate`): into a builtin, a sort or an
index argument, a container's ``append``, a ``get``/``getattr`` default, a function of the
file (:mod:`.reach`), a returned output record, einops, a submodule
(:mod:`.submodules`), or a torch op with other operands.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.attention import attention_input
from halfprec.leaks.lint.batched import condition_with_half
from halfprec.leaks.lint.context import dotted, words
from halfprec.leaks.lint.escapes import built_from, filled_in_place
from halfprec.leaks.lint.indexing import SOURCES
from halfprec.leaks.lint.keyedstores import keyed_store
from halfprec.leaks.lint.lambdas import lambda_step
from halfprec.leaks.lint.made import made_module_step
from halfprec.leaks.lint.methods import COUNTERS, DTYPED, KEEPS, SORTS, dtype_keyword
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.quantized import quantized
from halfprec.leaks.lint.reach import Follow, enter, to_readers
from halfprec.leaks.lint.sparse import sparse_step
from halfprec.leaks.lint.statements import enclosing, follow_looped
from halfprec.leaks.lint.submodules import hidden_state, is_submodule, loss_input, submodule
from halfprec.leaks.lint.torchfns import held_torch_function
from halfprec.leaks.lint.wrappers import wrapped
from halfprec.leaks.lint.writeback import in_place_into_half

_INT_ARGS = words("gather index_select take take_along_dim masked_select")
_TORCH_SAFE = words("isfinite isnan isinf is_tensor numel is_floating_point equal allclose")
# torch functions whose weight argument must have the input's dtype (else they raise)
_STRICT_WEIGHTS = {"cross_entropy": 2, "nll_loss": 2, "embedding_bag": -1}
_ROWS = words("list tuple")
_COPIES = ("cuda.comm.broadcast", "nn.parallel.comm.broadcast")  # t's copies, one per device
_BUILTIN_SAFE = words("len int float bool print isinstance range list tuple str repr hash callable")


def argument_step(f: Follow, node: ast.AST, call: ast.Call) -> str:
    """``t`` passed to ``call``."""
    func = call.func
    name = dotted(func)
    last = name.rsplit(".", 1)[-1] if name else ""
    owner = name.rsplit(".", 1)[0] if "." in name else ""
    others = [a for a in (*call.args, *(k.value for k in call.keywords)) if a is not node]
    if quantized(node, call, f.ctx):
        return "safe"  # torch.quantize_per_tensor(t, ...): quint8, no fp32 goes on
    if name.endswith(_COPIES) and name.split(".")[0] in f.ctx.imports.torch and call.args:
        return "up" if call.args[0] is node else "unknown"  # its copies, one per device
    builtin = _builtin_step(f, node, call) or _dtyped(f, node, call, last, owner)
    builtin = builtin or sparse_step(node, call, f.ctx)  # sparse_coo_tensor(i, t, size)
    if builtin is not None:
        return builtin
    stored = _held_by(f, node, call, last) or keyed_store(f, node, call)
    if stored is not None:
        return stored
    held = wrapped(f, node, call) or filled_in_place(node, call)
    if held is not None:
        return held  # nn.Parameter(t), self.register_buffer("m", t): module state made now
    if last.endswith("_like") and any(k.arg == "dtype" for k in call.keywords):
        return "safe"  # torch.zeros_like(t, dtype=torch.long): t gives only the shape
    if last in SORTS or last in _TORCH_SAFE:
        return "integer" if last in SORTS else "safe"
    if _mask_argument(node, call, last, owner in f.ctx.imports.torch):
        return "integer"  # h.masked_fill(t, v): a mask (a floating one raises there)
    if _fill_value(node, call, last, owner in f.ctx.imports.torch):
        return "safe"  # h.masked_fill(m, t), torch.full_like(h, t): written in h's dtype
    if last == "grid_sample":
        f.fate.grid = f.fate.grid or (len(call.args) > 1 and call.args[1] is node)
        return f.meets(call.args[:1])
    if last in _INT_ARGS and owner in f.ctx.imports.torch and _source(node, call):
        return "up"  # torch.gather(mask, 1, index=ids): the result holds mask's values
    source = (
        call.args[-1]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "source"), None)
    )
    if last in SOURCES and isinstance(func, ast.Attribute) and node is source:
        return "leak" if f.floating(func.value) else "unknown"  # h.index_copy_(0, idx, t)
    if last in _INT_ARGS or last in COUNTERS:
        # an index argument, or a counter's source: integer-ness matters; a half receiver
        # meeting an fp32 source is a dtype mismatch
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if receiver is not None and f.floating(receiver) and last in COUNTERS:
            return "leak"
        return "integer"
    if in_place_into_half(f, call):
        return "safe"  # h.add_(t), h.copy_(t): stored into half (see .writeback)
    if "distributions" in owner.split("."):  # torch.distributions.Normal(loc=t, scale=s)
        return f.meets(others) if last == "kl_divergence" else "up"
    entered = enter(f, node, _bound_call(call, last, node))
    if entered is not None:
        return entered
    if _returned_record(f, node, call, last) or built_from(node, call, f.ctx):
        return "up"  # return ModelOutput(logits=t): the output holds t
    first = bool(call.args) and call.args[0] is node
    if name in f.ctx.imports.einops:  # einops.einsum(t, h, "..."): promoted inputs' dtype
        return f.meets([a for a in call.args if a is not node and not isinstance(a, ast.Constant)])
    if _default(func, node, call):
        return "safe" if _read_before(f, func, call) else "up"  # batch.get("target", t)
    if last in _PASSES and first and (isinstance(func, ast.Name) or owner == "einops"):
        return "up"  # einops.rearrange(t, "b n -> n b"): the same values, rearranged
    if last in _PADS and first and (isinstance(func, ast.Name) or owner.endswith("rnn")):
        return "up"  # nn.utils.rnn.pad_sequence(ts): the same values, padded or packed
    made = made_module_step(f, node, call) or lambda_step(f, node, call)
    if made is not None:
        return made  # blur = GaussianBlur2d(k).to(device) in forward: fp32, not converted
    if held_torch_function(f.ctx, func):
        return f.meets(others)  # self.permute(x, w) of self.permute = F.conv2d
    if is_submodule(f.ctx, func):
        return _into_submodule(f, node, call, first)
    torch_call = _torch_call(f, func, owner)
    if torch_call and _leaking_weight(f, node, call, last):
        return "leak"  # F.cross_entropy(h, y, weight=t): t must have h's dtype, or it raises
    if torch_call or isinstance(func, ast.Attribute) and last in KEEPS:
        receiver = func.value if isinstance(func, ast.Attribute) and not torch_call else None
        return f.meets(others if receiver is None else [*others, receiver])
    return "unknown"


def _into_submodule(f: Follow, node: ast.AST, call: ast.Call, first: bool) -> str:
    """``t`` given to a submodule: its first input, a loss's target, a recurrent layer's
    state, a per-batch condition beside a half input (see :mod:`.batched`), or unknown."""
    if first:
        return submodule(f, call.func)
    if loss_input(f, call.func):
        return "up"  # self.ce(h, t): the loss of an fp32 target
    if hidden_state(f.ctx, call.func, node, call) or condition_with_half(f, node, call):
        return "leak"  # an LSTM's fp32 state; a per-batch time beside the half state
    if attention_input(f, node, call):
        return "leak"  # self.attn(h, h, h, attn_mask=t): an fp32 float mask raises there
    return "unknown"


def _builtin_step(f: Follow, node: ast.AST, call: ast.Call) -> str | None:
    """``t`` passed to a Python builtin; None for any other call."""
    func = call.func
    if not isinstance(func, ast.Name):
        return None
    if func.id in _ROWS and call.args[:1] == [node]:
        return "up"  # list(t): its rows, in its dtype
    if func.id == "sum" and call.args[:1] == [node] and not _defined(f, func.id):
        return "up"  # sum(losses) of a list holding t: 0 + t + ..., t's dtype goes on
    if func.id in _BUILTIN_SAFE:
        return "safe"
    if func.id == "dict":
        if isinstance(node, ast.keyword):  # dict(mask=t): the dict holds t under "mask"
            f.key = node.arg
        return "up"
    return None


def _defined(f: Follow, name: str) -> bool:
    """Whether the file defines a function ``name`` (one that hides the builtin)."""
    calls = f.ctx.calls
    return calls is not None and name in calls.program.functions


def _bound_call(call: ast.Call, last: str, node: ast.AST) -> ast.Call:
    """``functools.partial(self._kl, target=t)``: ``t`` goes to ``self._kl`` as if it were
    called with the bound arguments (what the partial returns is not followed back)."""
    if last != "partial" or not call.args or call.args[0] is node:
        return call
    return ast.Call(func=call.args[0], args=call.args[1:], keywords=call.keywords)


def _default(func: ast.AST, node: ast.AST, call: ast.Call) -> bool:
    """``d.get(key, t)``, ``d.pop(key, t)``, ``getattr(obj, name, t)``: a default the call
    hands back when the key is missing."""
    args = call.args
    if isinstance(func, ast.Name) and func.id == "getattr":
        return len(args) == 3 and args[2] is node
    takes = isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault")
    return takes and len(args) == 2 and args[1] is node


def _held_by(f: Follow, node: ast.AST, call: ast.Call, last: str) -> str | None:
    """``pieces.append(t)``, ``total.update(self._aux(...))``, ``g.ndata.update({"h": t})``,
    ``d.update(h=t)``, ``slots.setdefault("b", t)``: the container holds ``t``, a name or
    an attribute of any object; None when ``call`` stores nothing."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if last in _STORES and node in call.args or last == "update":
        return _store(f, func.value, call)
    if last == "setdefault" and _default(func, node, call):
        return _kept_default(f, func, call)  # it also hands t back
    return None


def _kept_default(f: Follow, func: ast.Attribute, call: ast.Call) -> str:
    """``d.setdefault(key, t)``: ``d`` holds ``t`` from here on (unless the key was read
    before), and the call hands ``t`` back."""
    if _read_before(f, func, call):
        return "safe"
    key, kept = call.args[0], f.key
    f.key = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
    try:
        step = _store(f, func.value, call)
    finally:
        f.key = kept
    if f.fate.leaks:
        return "done"
    return "up" if step == "done" else step


def _read_before(f: Follow, func: ast.AST, call: ast.Call) -> bool:
    """``batch["x"]`` read before ``batch.get("x", t)``: the key is there (or that read
    raised), so the default is never taken."""
    key = call.args[0]
    if not (isinstance(func, ast.Attribute) and isinstance(key, ast.Constant)):
        return False
    holder = ast.dump(func.value)
    here = (call.lineno, call.col_offset)
    for n in walk(f.ctx.function) if f.ctx.function is not None else ():
        if not (isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)):
            continue
        same = n.slice.value == key.value and ast.dump(n.value) == holder
        if same and (n.lineno, n.col_offset) < here:
            return True
    return False


_PASSES = words("rearrange repeat")
_PADS = words("pad_sequence pack_padded_sequence pad_packed_sequence pack_sequence")
_STORES = words("append extend insert appendleft extendleft")  # list.append(t): it holds t


def _returned_record(f: Follow, node: ast.AST, call: ast.Call, last: str) -> bool:
    """``return Output(logits=t)`` in a ``forward``: a class of another file, built and
    returned at once or bound to a name, holds ``t`` (as its field ``logits``)."""
    if not f.ctx.is_forward or not last[:1].isupper() or not any(c.islower() for c in last):
        return False
    held = f.ctx.parents.get(id(call))
    named = isinstance(held, ast.Assign) and all(isinstance(t, ast.Name) for t in held.targets)
    if not (isinstance(held, ast.Return) or named):
        return False  # out = Output(logits=t): followed on as the name out
    if isinstance(node, ast.keyword):  # the step from the keyword up to the call
        f.key = node.arg
    return True


def _store(f: Follow, holder: ast.AST, call: ast.Call) -> str:
    """``pieces.append(t)``: ``pieces`` holds ``t`` from here on, so follow ``pieces`` (a
    ``self`` attribute into its reads). A floating tensor receiving it (never a list's
    method name) is not a holder; a list filled with floating tensors is one."""
    filled = isinstance(holder, ast.Name) and holder.id in f.ctx.filled
    if f.floating(holder) and not filled:
        return "unknown"
    if isinstance(holder, ast.Name):
        stmt = enclosing(f, call)
        f.follow_name(holder.id, stmt)
        if isinstance(stmt, ast.stmt):
            follow_looped(f, holder.id, stmt)  # for b in buckets: b.append(t)
        return "done"
    if isinstance(holder, ast.Attribute) and to_readers(f, holder):
        return "done"
    return "unknown"


def _source(node: ast.AST, call: ast.Call) -> bool:
    """Whether ``node`` is the input whose values ``torch.gather(input, dim, index)`` (or
    ``index_select``, ``take``, ...) picks, not the index."""
    first = bool(call.args) and call.args[0] is node
    return first or any(k.arg == "input" and k.value is node for k in call.keywords)


_MASKED = words("masked_fill masked_fill_ masked_scatter masked_scatter_ masked_select")


def _dtyped(f: Follow, node: ast.AST, call: ast.Call, last: str, owner: str) -> str | None:
    """``torch.cumsum(t, 1, dtype=x.dtype)``, ``F.softmax(t, 1, dtype=d)``: a torch op (also
    ``torch.special``/``torch.linalg``, ``torch.nn.functional`` under a local name) whose
    ``dtype=`` casts its first argument (see :func:`.methods.dtype_keyword`)."""
    imports = f.ctx.imports
    torch_op = owner.split(".")[0] in imports.torch or owner in imports.functional
    first = bool(call.args) and call.args[0] is node
    return dtype_keyword(f, call) if last in DTYPED and first and torch_op else None


def _mask_argument(node: ast.AST, call: ast.Call, last: str, torch_call: bool) -> bool:
    """``h.masked_fill(t, v)``, ``torch.masked_fill(h, t, v)``, ``mask=t``: ``t`` is where
    the op writes or reads, used as booleans, never as values."""
    if last not in _MASKED:
        return False
    if any(k.arg == "mask" and k.value is node for k in call.keywords):
        return True
    position = 1 if torch_call else 0
    return len(call.args) > position and call.args[position] is node


def _fill_value(node: ast.AST, call: ast.Call, last: str, torch_call: bool) -> bool:
    """``h.masked_fill(m, t)``, ``torch.masked_fill(h, m, t)``, ``value=t``: the fill value,
    which must be 0-dim and is written in the receiver's dtype (checked with torch 2.13);
    ``torch.full_like(h, t)``: written in ``h``'s dtype."""
    if last == "full_like":
        return node in call.args[1:2] + [k.value for k in call.keywords if k.arg == "fill_value"]
    if last not in ("masked_fill", "masked_fill_"):
        return False
    if any(k.arg == "value" and k.value is node for k in call.keywords):
        return True
    position = 2 if torch_call else 1
    return len(call.args) > position and call.args[position] is node


def _torch_call(f: Follow, func: ast.AST, owner: str) -> bool:
    """``torch.cat``, ``F.conv2d``, ``torch.linalg.solve``, a torch function imported by name."""
    imports = f.ctx.imports
    if owner in imports.torch or owner in imports.functional:
        return True
    if owner.endswith(("nn.functional", "torch.linalg", "torch.fft")):
        return True
    return isinstance(func, ast.Name) and func.id in imports.functions


def _leaking_weight(f: Follow, node: ast.AST, call: ast.Call, last: str) -> bool:
    """``t`` is a weight that must have the input's dtype (:func:`_strict_weight`) and the
    input is half: a leak also for data of any dtype (an int64 weight raises too)."""
    if not _strict_weight(node, call, last):
        return False
    f.strict = True
    return not f.scalar and any(f.floating(a) for a in call.args)


def _strict_weight(node: ast.AST, call: ast.Call, last: str) -> bool:
    """``t`` is the class ``weight`` of ``cross_entropy``/``nll_loss`` (keyword or third
    argument) or the ``per_sample_weights`` of ``embedding_bag``."""
    at = _STRICT_WEIGHTS.get(last)
    if at is None:
        return False
    keyword = "per_sample_weights" if at < 0 else "weight"
    if any(k.arg == keyword and k.value is node for k in call.keywords):
        return True
    return 0 <= at < len(call.args) and call.args[at] is node
