"""Python source files as bytes and text: decode with the encoding Python itself would use
(PEP 263 cookie, UTF-8 BOM, default UTF-8), split lines the way the tokenizer does, and
encode fixed text back to exactly the original bytes outside the fixed spans.

``str.splitlines`` also splits on form feed, vertical tab, ``\\x1c``-``\\x1e``, ``\\x85``
and U+2028/2029, which Python does not count as line breaks; line numbers from ``ast``
then point at the wrong line. :func:`split_lines` splits on ``\\r\\n``, ``\\r`` and ``\\n``
only.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

_LINE_END = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")


class SourceError(ValueError):
    """A file whose bytes cannot be decoded (or re-encoded) as Python source."""


@dataclass(frozen=True)
class SourceText:
    """The decoded text of a file and the encoding its bytes come back from.

    ``encoding`` is what :func:`tokenize.detect_encoding` reports; ``utf-8-sig`` (a BOM)
    puts the BOM back when encoding.
    """

    text: str
    encoding: str

    def encode(self, text: str) -> bytes:
        """``text`` in this file's encoding (raises :class:`SourceError` if it cannot be)."""
        try:
            return text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            raise SourceError(
                f"the fixed text does not fit {self.encoding}: {exc.reason}"
            ) from None


def decode_source(data: bytes) -> SourceText:
    """Decode a Python file's bytes as Python does; :class:`SourceError` when that fails or
    when encoding the text again would not give the same bytes."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise SourceError(
            f"cannot decode ({reason}); save it as UTF-8 or declare its encoding "
            "in a PEP 263 line such as `# -*- coding: latin-1 -*-`"
        ) from None
    source = SourceText(text, encoding)
    try:
        same = source.encode(text) == data
    except SourceError:
        same = False
    if not same:
        raise SourceError(f"cannot decode: {encoding} does not give back this file's bytes")
    return source


def split_lines(text: str, keepends: bool = False) -> list[str]:
    """Lines as Python's tokenizer counts them: ends are ``\\r\\n``, ``\\r`` or ``\\n``."""
    if not keepends and "\r" not in text:  # "\n" ends only: str.split, many times faster
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return lines
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    if keepends:
        return lines
    return [line.rstrip("\r\n") for line in lines]
