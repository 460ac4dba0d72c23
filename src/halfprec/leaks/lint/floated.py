"""``torch.tensor(data)`` of data of any dtype (see :mod:`.factories`) is only *unsure*: int
data would take a half tensor's dtype where it meets one, a NumPy array keeps its own dtype
(half features stay half). Where the data is Python numbers (a parameter annotated
``list[float]``, ``Sequence[float]``...), an op that gives floats of any input ends that:
``F.softmax(w)``, ``w.sigmoid()``, ``torch.exp(w)``, ``w / n`` (true division) are
floating tensors of the data's floating dtype, fp32 or fp64 (int data gives fp32, or
raises), never half; followed on from there as a factory's fp32 tensor. An element
read on the way (``sigmas[idx]``) may be 0-dim, which keeps half operands half: a meeting
after it is not reported.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words

_FLOATS = words(
    "softmax log_softmax sigmoid tanh exp log log1p log2 log10 sqrt rsqrt erf gelu silu "
    "logsigmoid softplus normalize true_divide reciprocal"
)


_SEQUENCES = frozenset({"list", "List", "Sequence", "tuple", "Tuple", "Iterable"})
_ARRAYS = frozenset({"ndarray", "Tensor", "Any", "array", "ArrayLike"})


def python_numbers(call: ast.AST, ctx: Context) -> bool:
    """Whether ``torch.tensor(data)`` is given a parameter annotated as a sequence of Python
    numbers (``teacher: list[float]``, ``Optional[List[float]]``, ``w: list``)."""
    fn = ctx.function
    data = call.args[0] if isinstance(call, ast.Call) and call.args else None
    if not isinstance(data, ast.Name) or not isinstance(
        fn, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        return False
    a = fn.args
    param = next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == data.id), None)
    if param is None or param.annotation is None:
        return False
    names = {dotted(n).rsplit(".", 1)[-1] for n in ast.walk(param.annotation)}
    names |= {
        n.value
        for n in ast.walk(param.annotation)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    return bool(names & _SEQUENCES) and not names & _ARRAYS


def floats_here(node: ast.AST, parent: ast.AST, ctx: Context) -> bool:
    """Whether the step from ``node`` up into ``parent`` gives floats of any input."""
    if isinstance(parent, ast.BinOp):
        return isinstance(parent.op, ast.Div)
    if isinstance(parent, ast.Call) and node in parent.args[:1]:
        owner = dotted(parent.func).rsplit(".", 1)[0]
        imports = ctx.imports
        torch_fn = owner in imports.torch or owner in imports.functional
        return torch_fn and dotted(parent.func).rsplit(".", 1)[-1] in _FLOATS
    if isinstance(parent, ast.Attribute) and parent.value is node:
        call = ctx.parents.get(id(parent))
        return isinstance(call, ast.Call) and call.func is parent and parent.attr in _FLOATS
    return False


def floated_message(message: str) -> str:
    """A ``torch.tensor(data)`` finding's message where an op made the data floating."""
    call, sep, _ = message.partition(" of data of another dtype")
    if not sep:
        return message
    return (
        f"{call} of data made floating on the way is fp32 (or fp64) in a half model too and "
        "meets half values or reaches the output; cast it with `.to(x.dtype)`"
    )


def picks_elements(index: ast.AST) -> bool:
    """``t[i]``, ``t[i, j]``, ``t[seq[k]]``: an index with no slice, ``None`` or ``...``,
    which may read one element."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return not any(
        isinstance(p, (ast.Slice, ast.Starred))
        or isinstance(p, ast.Constant)
        and (p.value is None or p.value is Ellipsis)
        for p in parts
    )
