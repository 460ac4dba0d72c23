#!/usr/bin/env bash
# The test command: lint, check the import layering, then type-check and the whole test
# suite side by side (mypy uses one core; two pytest workers share the rest).
# Uses the same interpreter as scripts/install.sh: $PYTHON, else .venv/bin/python if present,
# else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python.sh
export HF_HUB_OFFLINE=1
"$PY" -m ruff check src tests benchmarks examples
"$PY" -m ruff format --check --quiet src tests benchmarks examples
PYTHONPATH=src "$PY" -c 'from importlinter.cli import lint_imports_command; lint_imports_command()'
mypy_log="$(mktemp)"
trap 'rm -f "$mypy_log"' EXIT
"$PY" -m mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
status=0
# two pytest workers (pytest-xdist; CI has 2 cores); a test file stays on one worker, so its
# module fixtures are built once
"$PY" -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@" || status=$?
wait "$mypy_pid" || status=1
cat "$mypy_log"
exit "$status"
