#!/usr/bin/env bash
# GPU check (two steps, time-outs 240 s and 300 s): the CUDA tests, then fp16/bf16 vs fp32 speed with TF32
# off, eager and compiled, written as the page docs/gpu.md (replaced on every run).
# Usage: scripts/gpu-check.sh   (from the repository root; fails loudly without CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
source scripts/python.sh  # $PYTHON, else .venv/bin/python, else python3
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu-check: no CUDA device visible to torch; run this on a machine with a GPU" >&2
  exit 2
fi
"$PY" -c 'import torch; print("gpu-check:", torch.cuda.get_device_name(0), "x", torch.cuda.device_count(), "torch", torch.__version__)'
# the CUDA tests: device table, converted forward, GradScaler step, DataParallel (2 GPUs),
# compiled bench variant
timeout 240 "$PY" -m pytest -q -rs tests/integration/test_cuda.py
# speed table, eager and max-autotune compiled, TF32 off
timeout 300 "$PY" benchmarks/gpu_speed.py --models "${GPU_CHECK_MODELS:-bert-base,minilm}"
echo "gpu-check: done; tables written to docs/gpu.md"
