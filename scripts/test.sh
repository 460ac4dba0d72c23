#!/usr/bin/env bash
# The test command: lint, type-check, then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
python3 -m ruff check src tests benchmarks examples
python3 -m mypy
python3 -m pytest -q "$@"
