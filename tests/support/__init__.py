"""Helpers shared by the tests, imported as ``support.NAME`` (``tests/`` is on pytest's path).

The module files here are also MODEL specs for the CLI (``tests/support/export_models.py:tiny``)
and scripts that tests run in a subprocess (``kill_jobs.py``, ``train_job.py``).
"""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
SRC = ROOT / "src"
FIXTURES = TESTS / "fixtures"
