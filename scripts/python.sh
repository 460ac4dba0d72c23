# Sourced by install.sh and test.sh: picks the one interpreter both use.
# $PYTHON wins; else the project venv .venv/bin/python when it exists; else python3.
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
fi
