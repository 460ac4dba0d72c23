"""The calls a function's text shows (:func:`called_names`, :func:`held_calls`) are read
backwards from each ``(``; they are the matches of the regexes that define them, on text
written to trip a backwards read: ``self.`` inside a longer name, a dotted chain, a
number's digits, non-ASCII names, a line break before ``(``."""

from __future__ import annotations

import ast
import re

import pytest

from halfprec.leaks.lint.scope import called_names, held_calls

_CALL = re.compile(r"(?<![\w.])(self\.)?([A-Za-z_]\w*)\s*\(")
_HELD = re.compile(r"(?<![\w.])(self\.)?([A-Za-z_]\w*)\.([A-Za-z_]\w*)\s*\(")

_TEXTS = [
    "y = self.proj(x) + f(x)",
    "y = self.self(x) + myself.f(x) + x.self.f(x)",
    "y = a.b.c(x) + self.a.b(x) + self.x.y.z(x) + .self.x(x)",
    "y = 2x(x) + x.2y(x) + é(x) + éa(x) + a.é(x) + self.é(x)",
    "y = self .f(x) + self.\nf(x) + f\n(x) + self.x  (x) + x.y\t(x)",
    "y = (a(b(c(x))))[0](x) + _(x) + self._(x) + self.block.forward(x)",
]


def _function(text: str) -> tuple[ast.FunctionDef, list[str]]:
    """A function whose body is ``text`` (parsed as a string: any text goes), its lines."""
    source = f"def f(x):\n    return {text!r}\n"
    fn = ast.parse(source).body[0]
    assert isinstance(fn, ast.FunctionDef)
    lines = ["def f(x):", *text.split("\n")]
    fn.end_lineno = len(lines)
    return fn, lines


@pytest.mark.parametrize("text", _TEXTS)
def test_calls_are_the_regexes_matches(text: str) -> None:
    fn, lines = _function(text)
    whole = "\n".join(lines)
    assert list(called_names(fn, lines)) == [
        (m.group(1) is not None, m.group(2)) for m in _CALL.finditer(whole)
    ]
    assert list(held_calls(fn, lines)) == [
        (m.group(1) is not None, m.group(2), m.group(3)) for m in _HELD.finditer(whole)
    ]


def test_calls_in_order() -> None:
    fn, lines = _function(_TEXTS[0] + "\n" + _TEXTS[2])
    assert list(called_names(fn, lines)) == [(False, "f"), (True, "proj"), (False, "f")]
    assert list(held_calls(fn, lines)) == [(False, "self", "proj"), (True, "a", "b")]
