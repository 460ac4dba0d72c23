"""Names that hold complex tensors: never the model's half dtype.

A spectrum (``torch.stft``, ``torch.fft.rfft``) is complex64 in a half model too, so an fp32
tensor that meets it meets no half tensor. A value made by such a call is already not
floating (:mod:`.values` knows no complex op); an *input* is known complex by how the
function reads it: ``x.conj()``, ``x.real``, ``x.imag``, ``x.angle()``,
``torch.view_as_real(x)``: none of these has a use on a real tensor. A name bound to a
spectrum (``spec = torch.stft(...)``) is complex, and so is a name bound to arithmetic
or a torch function of a complex name (``scm = torch.einsum("...", mask * x, x.conj())``),
unless it takes the real part, the magnitude or the phase.
"""

from __future__ import annotations

import ast
import re

from halfprec.leaks.lint.context import words
from halfprec.leaks.lint.nodes import walk

_READS = words("real imag")
_METHODS = words("conj conj_physical angle")
_FUNCTIONS = words("view_as_real real imag conj conj_physical angle")
_MAKERS = words(
    "stft fft ifft rfft fft2 ifft2 rfft2 fftn ifftn rfftn view_as_complex polar complex"
)
_REAL = words("real imag abs angle view_as_real shape size dtype device ndim numel dim")


_HINT = re.compile(
    r"\.(conj|conj_physical|real|imag|angle|view_as_real|view_as_complex|polar|complex|stft|"
    r"fft|ifft|rfft|fft2|ifft2|rfft2|fftn|ifftn|rfftn)\b"
)


def complex_names(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> frozenset[str]:
    """The names ``fn`` reads as complex tensors (see the module docstring); ``lines``: the
    file's, read first so that a function that never says so is not walked."""
    text = "\n".join(lines[fn.lineno - 1 : fn.end_lineno or fn.lineno])
    if not _HINT.search(text):
        return frozenset()
    out: set[str] = set()
    for node in walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in _READS or node.attr in _METHODS:
                out.add(node.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            first = node.args[0] if node.args else None
            if node.func.attr in _FUNCTIONS and isinstance(first, ast.Name):
                out.add(first.id)
    for stmt in walk(fn):
        if isinstance(stmt, ast.Assign) and (_made(stmt.value) or _carries(stmt.value, out)):
            out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return frozenset(out)


def _made(expr: ast.AST) -> bool:
    """``torch.stft(x, n, return_complex=True)``, ``torch.fft.rfft(x)``, ``x.stft(...)``:
    a complex result (``irfft`` and ``hfft`` give real ones and are not listed)."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)):
        return False
    real = any(
        k.arg == "return_complex" and isinstance(k.value, ast.Constant) and not k.value.value
        for k in expr.keywords
    )
    return expr.func.attr in _MAKERS and not real


def _carries(expr: ast.AST, names: set[str]) -> bool:
    """Whether ``expr`` is complex because it computes with one of ``names``."""
    if isinstance(expr, ast.Name):
        return expr.id in names
    if isinstance(expr, ast.BinOp):
        return _carries(expr.left, names) or _carries(expr.right, names)
    if isinstance(expr, (ast.UnaryOp, ast.Subscript)):
        return _carries(expr.operand if isinstance(expr, ast.UnaryOp) else expr.value, names)
    if isinstance(expr, ast.Attribute):
        return expr.attr not in _REAL and _carries(expr.value, names)
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Attribute):
        return False
    func = expr.func
    if func.attr in _REAL:
        return False
    if isinstance(func.value, ast.Name) and func.value.id in names:
        return True  # x.transpose(1, 2)
    if isinstance(func.value, ast.Name) and func.value.id in ("torch", "th"):
        return any(_carries(a, names) for a in expr.args)  # torch.einsum("...", x, y)
    return False
