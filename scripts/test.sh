#!/usr/bin/env bash
# The test command. Two tiers:
#   bash scripts/test.sh         fast tier: ruff, import layering, mypy, and every test not
#                                marked slow or gpu (in-process: no subprocess, no real-size
#                                model, no torch.compile)
#   bash scripts/test.sh --all   everything: the fast tier plus the slow tests (subprocesses,
#                                real MiniLM, exports to every format, torchrun); gpu tests
#                                skip themselves without CUDA
# Other arguments go to pytest (e.g. `bash scripts/test.sh tests/convert -x`).
# Uses the same interpreter as scripts/install.sh: $PYTHON, else .venv/bin/python if present,
# else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python.sh
export HF_HUB_OFFLINE=1
tier=(-m "not slow and not gpu")
if [ "${1:-}" = "--all" ]; then
  tier=()
  shift
fi
"$PY" -m ruff check src tests benchmarks examples
"$PY" -m ruff format --check --quiet src tests benchmarks examples
PYTHONPATH=src "$PY" -c 'from importlinter.cli import lint_imports_command; lint_imports_command()'
mypy_log="$(mktemp)"
trap 'rm -f "$mypy_log"' EXIT
"$PY" -m mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
status=0
# two pytest workers (pytest-xdist; CI has 2 cores); a test file stays on one worker, so its
# module fixtures are built once. --max-worker-restart=0: a worker that dies fails the run
# naming the test it was running; replacing it under --dist loadfile can hang the whole run
# (pytest-xdist 3.8.0, pytest-dev/pytest-xdist#784 and #1378; seen here once, 2026-12-01)
"$PY" -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile --max-worker-restart=0 \
  ${tier[@]+"${tier[@]}"} "$@" || status=$?
wait "$mypy_pid" || status=1
cat "$mypy_log"
exit "$status"
