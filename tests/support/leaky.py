"""The audit fixture ``tests/fixtures/audit/leaky.py``: loaded as a module, and its lines
marked ``# leak: KIND``."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

from support import FIXTURES

LEAKY = FIXTURES / "audit" / "leaky.py"
MARK = re.compile(r"#\s*leak:\s*(\w+)")


def load_leaky() -> ModuleType:
    spec = importlib.util.spec_from_file_location("halfprec_leaky_fixture", LEAKY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def marked_leaks() -> set[tuple[int, str]]:
    """(line, kind) of every ``# leak: KIND`` comment in the fixture."""
    lines = LEAKY.read_text().splitlines()
    return {(i, m.group(1)) for i, text in enumerate(lines, 1) if (m := MARK.search(text))}
