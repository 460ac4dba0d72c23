# Sourced by install.sh, test.sh, gpu-check.sh and scripts/halfprec: picks the one interpreter
# they all use. $PYTHON wins; else the project venv .venv/bin/python when it exists; else python3.
_halfprec_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x "$_halfprec_root/.venv/bin/python" ]; then
  PY="$_halfprec_root/.venv/bin/python"
else
  PY=python3
fi
