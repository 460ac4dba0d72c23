"""An upcast made only on some devices keeps the half value on the others.

``if not acts.is_cuda and acts.dtype == torch.float16: acts = acts.float()`` (a "CPU
patch": CPU kernels lacking for half) leaves ``acts`` half on a GPU, so the code after
the ``if`` reads a half tensor there, and an fp32 lattice that meets it is a leak on
that device. The walk (:mod:`.flow`) takes a name rebound to an explicit upcast of itself
in the body of an ``if`` whose test reads a device (``x.is_cuda``, ``x.device``,
``x.device.type``) as still floating after the ``if``, where it was floating before.
An upcast under a test of the dtype alone (``if x.dtype == torch.float16``) or a flag
stays what it was: the name is not known as half after it.
"""

from __future__ import annotations

import ast

_DEVICE_READS = frozenset({"is_cuda", "is_cpu", "is_mps", "device"})
_UPCASTS = frozenset({"float", "double"})
_FP32 = frozenset({"float", "float32", "double", "float64"})


def device_upcasts(stmt: ast.stmt) -> set[str]:
    """The names the body of the ``if`` ``stmt`` rebinds to an explicit upcast of
    themselves (``x = x.float()``, ``x = x.to(torch.float32)``) when its test reads a
    device; empty for any other statement."""
    if not isinstance(stmt, ast.If) or not _reads_device(stmt.test):
        return set()
    names = set()
    for node in stmt.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name) and _upcast_of(node.value, target.id):
            names.add(target.id)
    return names


def _reads_device(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in _DEVICE_READS for n in ast.walk(test))


def _upcast_of(value: ast.AST, name: str) -> bool:
    """``name.float()``, ``name.double()``, ``name.to(torch.float32)``, ``name.type(...)``."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    func = value.func
    if not (isinstance(func.value, ast.Name) and func.value.id == name):
        return False
    if func.attr in _UPCASTS and not value.args:
        return True
    dtypes = [*value.args, *(k.value for k in value.keywords if k.arg == "dtype")]
    fp32 = any(isinstance(d, ast.Attribute) and d.attr in _FP32 for d in dtypes)
    return func.attr in ("to", "type") and fp32
