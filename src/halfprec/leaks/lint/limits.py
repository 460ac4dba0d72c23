"""Limits of fp32 or fp64 that half holds (see HP302 in :mod:`.constants`).

``torch.finfo(torch.float32).eps`` is 2**-23: a subnormal in fp16 (whose smallest is
2**-24) and a normal number in bf16, so in a half model it is the same nonzero number, not
a limit that rounds to 0 or overflows. ``.tiny`` (2**-126) rounds to 0 in fp16, ``.max``
and ``.min`` overflow in fp16 and in bf16 (fp32's max rounds up to bf16's inf), and
fp64's ``.eps`` (2**-52) rounds to 0 in fp16: those are still reported.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.casts import is_fp32_dtype
from halfprec.leaks.lint.context import Context, dotted, words

_FP16_MAX = 65504.0  # torch.finfo(torch.float16).max
_FP16_ZERO = 2.0**-25  # at or below half fp16's smallest subnormal, a number rounds to 0
_LIMITS = {
    # attribute: (fp32 value, fp64 value)
    "eps": (2.0**-23, 2.0**-52),
    "resolution": (1e-6, 1e-15),
    "tiny": (2.0**-126, 2.0**-1022),
    "smallest_normal": (2.0**-126, 2.0**-1022),
    "max": (3.4028234663852886e38, 1.7976931348623157e308),
    "min": (-3.4028234663852886e38, -1.7976931348623157e308),
}
_DOUBLE = words("float64 double DoubleTensor")


def held_in_half(call: ast.Call, arg: ast.AST, ctx: Context) -> bool:
    """Whether ``call`` (``torch.finfo(arg)``) is read for one limit whose value fp16 and
    bf16 both hold, nonzero and finite: ``torch.finfo(torch.float32).eps``."""
    parent = ctx.parents.get(id(call))
    if not isinstance(parent, ast.Attribute) or parent.attr not in _LIMITS:
        return False
    if not is_fp32_dtype(arg, ctx):
        return False
    value = _LIMITS[parent.attr][dotted(arg).rsplit(".", 1)[-1] in _DOUBLE]
    return _FP16_ZERO < abs(value) < _FP16_MAX
