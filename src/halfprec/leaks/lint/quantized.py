"""A followed tensor made quantized (``torch.quantize_per_tensor(t, scale, zp, torch.quint8)``,
``torch.quantize_per_channel(...)``): the result is a quantized tensor (quint8, qint8,
qint32), neither fp32 nor half, so the fp32 values end there, as at a cast (see
:mod:`.arguments`).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words

_QUANTIZE = words("quantize_per_tensor quantize_per_channel quantize_per_tensor_dynamic")


def quantized(node: ast.AST, call: ast.Call, ctx: Context) -> bool:
    """Whether ``call`` is ``torch.quantize_per_*`` of ``node`` (its input)."""
    name = dotted(call.func)
    owner, _, last = name.rpartition(".")
    if last not in _QUANTIZE or owner not in ctx.imports.torch:
        return False
    given = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "input"), None)
    )
    return given is node
