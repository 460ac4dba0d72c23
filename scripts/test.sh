#!/usr/bin/env bash
# The test command: lint, type-check, check the import layering, then the whole test suite.
# Uses the same interpreter as scripts/install.sh: $PYTHON, else .venv/bin/python if present,
# else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python.sh
export HF_HUB_OFFLINE=1
"$PY" -m ruff check src tests benchmarks examples
"$PY" -m mypy
PYTHONPATH=src "$PY" -c 'from importlinter.cli import lint_imports_command; lint_imports_command()'
# two pytest workers (pytest-xdist; CI has 2 cores); a test file stays on one worker, so its
# module fixtures are built once
"$PY" -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"
