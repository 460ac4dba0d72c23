#!/usr/bin/env bash
# The GPU check: nine steps (scripts/gpu_steps/), each under its own `timeout`, each
# APPENDING its result to docs/gpu.md as soon as it ends, so a step that times out or
# crashes keeps every result before it. Under 7 minutes on one GPU, whatever happens.
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
# step and its limit on a GPU: 380 s in all, plus at most 3 s each to die after a timeout
# and ~10 s of checks above, so the whole check ends within 7 minutes whatever happens
for entry in "tests 80" "compile 60" "bench 50" "gemm 15" "scaler 20" "stochastic 40" \
             "export 50" "ddp 40" "tf32 25"; do
  set -- $entry
  step=$1
  seconds=$(limit "$2")
  err=$(mktemp)
  before=$(grep -c '^### ' "$OUT")
  timeout --kill-after=3 "$seconds" "$PY" scripts/gpu_steps/run.py "$step" --out "$OUT" \
    $DRY $header 2> >(tee "$err" >&2)
  rc=$?
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
