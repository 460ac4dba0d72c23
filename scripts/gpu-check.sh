#!/usr/bin/env bash
# The GPU check: nine steps (scripts/gpu_steps/), each under its own `timeout`, each
# APPENDING its result to docs/gpu.md as soon as it ends, so a step that times out or
# crashes keeps every result before it. At most 300 s on one GPU, whatever happens: the
# step limits, the time a killed step may take to die and the checks before the first step
# add up to BUDGET_S (tests/integration/test_gpu_check.py parses this file to hold it so).
# Inside its limit a step stops the tools it starts earlier and reports what they printed.
# It installs nothing: it runs the machine's own python3 ($PYTHON wins) and names a missing
# package in one line (the steps that need it report "skipped"). A failing step does not
# stop the others; the exit status is 1 when any step failed or timed out.
#
#   bash scripts/gpu-check.sh            on a machine with CUDA: rewrites docs/gpu.md's results
#   bash scripts/gpu-check.sh --dry-run  every step's Python on the CPU at tiny sizes, no
#                                        timing claims, into a temporary file (GPU_CHECK_OUT)
set -u  # no -e: one step's failure is its result, not the end of the run
cd "$(dirname "$0")/.."
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
PY="${PYTHON:-python3}"
DRY=""
if [ "${1:-}" = "--dry-run" ]; then DRY="--dry-run"; fi

if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "gpu-check: $PY has no torch; nothing can run (install nothing here: use a machine that has it)" >&2
  exit 2
fi
missing=$("$PY" -c 'import importlib.util as u; print(" ".join(n for n in ("safetensors", "rich", "click", "numpy", "transformers", "onnx", "onnxruntime", "pytest") if u.find_spec(n) is None))')
if [ -n "$missing" ]; then
  echo "gpu-check: missing package(s): $missing; the steps that need them report skipped"
fi
if [ -z "$DRY" ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu-check: no CUDA device visible to torch; run it on a GPU, or with --dry-run" >&2
  exit 2
fi
# inductor (Triton on a GPU, C++ on the CPU) builds with a C compiler and Python's headers:
# without them the compiling steps skip, naming what is missing
cc="${CC:-$(command -v gcc || command -v cc || command -v clang || true)}"
headers=$("$PY" -c 'import os, sysconfig; print(os.path.join(sysconfig.get_paths()["include"], "Python.h"))')
if [ -z "$cc" ] || ! command -v "$cc" >/dev/null; then
  export GPU_CHECK_NO_COMPILE="this machine has no C compiler (gcc, cc or clang; \$CC)"
elif [ ! -f "$headers" ]; then
  export GPU_CHECK_NO_COMPILE="Python's headers are missing ($headers; e.g. apt-get install python3-dev)"
fi
if [ -n "${GPU_CHECK_NO_COMPILE:-}" ]; then
  echo "gpu-check: $GPU_CHECK_NO_COMPILE: the steps that compile report skipped"
fi

if [ -n "$DRY" ]; then
  OUT="${GPU_CHECK_OUT:-$(mktemp "${TMPDIR:-/tmp}/gpu-check-dry.XXXXXX")}"
  : > "$OUT"
  limit() { echo 240; }  # a busy CPU; the dry run proves the steps run, it times nothing
else
  OUT=docs/gpu.md
  # keep the page's header, drop the previous run's results
  sed -i '/^## The last run/,$d' "$OUT"
  limit() { echo "$1"; }
fi

failed=0
header="--header"
# Each step and its limit (s) on a GPU. BUDGET_S = the limits + KILL_AFTER_S for each step
# (a timed-out step's time to die) + CHECKS_S (the interpreter starts above): 300 s.
BUDGET_S=300
KILL_AFTER_S=3
CHECKS_S=13
STEPS="tests:55 compile:40 bench:30 gemm:10 scaler:15 stochastic:35 export:35 ddp:25 tf32:15"
total=$CHECKS_S
for entry in $STEPS; do total=$((total + ${entry##*:} + KILL_AFTER_S)); done
if [ "$total" -gt "$BUDGET_S" ]; then
  echo "gpu-check: the step limits come to $total s, over the budget of $BUDGET_S s" >&2
  exit 2
fi
for entry in $STEPS; do
  step=${entry%%:*}
  seconds=$(limit "${entry##*:}")
  err=$(mktemp)
  before=$(grep -c '^### ' "$OUT")
  # stderr into a file, copied out once the step has ended: no process substitution, whose
  # writer may still be running when the crash text is read below
  timeout --kill-after="$KILL_AFTER_S" "$seconds" "$PY" scripts/gpu_steps/run.py "$step" \
    --out "$OUT" --limit "$seconds" $DRY $header 2>"$err"
  rc=$?
  cat "$err" >&2
  header=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    printf '\n### step %s\n\n- **timed out** after %s s (its own limit)\n' "$step" "$seconds" >> "$OUT"
    failed=1
  elif [ $rc -ne 0 ]; then
    failed=1
    if [ "$(grep -c '^### ' "$OUT")" -eq "$before" ]; then  # it died before its section
      last=$(grep -v '^[[:space:]]*$' "$err" | tail -1 | cut -c1-300)
      printf '\n### step %s\n\n- **crashed** (exit %s): %s\n' "$step" "$rc" "$last" >> "$OUT"
    fi
  fi
  rm -f "$err"
done
echo "gpu-check: done; results in $OUT"
exit $failed
