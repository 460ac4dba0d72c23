#!/usr/bin/env bash
# The clean-install check: build halfprec's wheel, install it into a fresh venv with only
# its declared dependencies (no extras), and run what a user runs first: `import halfprec`,
# `halfprec --help`, `halfprec lint` on a file and `halfprec check` on a MODEL file with a
# safetensors inputs file. The dev extras install numpy, transformers, onnx, ..., so only a
# venv without them shows an import that the declared dependencies do not cover.
# torch is installed first and pinned (pip's find-links or cache supplies the wheel; an
# unpinned torch would fetch a multi-GB CUDA build). About 40 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python.sh
ci_step=wheel-check
source scripts/ci-lib.sh
"$PY" -m pip wheel "${pip_quiet[@]}" --no-deps --no-build-isolation --wheel-dir "$work/dist" "$root"
"$PY" -m venv "$work/venv"
venv_py="$work/venv/bin/python"
"$venv_py" -m pip install "${pip_quiet[@]}" "torch==2.13.0"
"$venv_py" -m pip install "${pip_quiet[@]}" "$work"/dist/halfprec-*.whl

cp "$root/tests/fixtures/user_model.py" "$work/model.py"
cat >"$work/leaky.py" <<'EOF'
import torch
from torch import nn


class Net(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.zeros(x.shape)  # fp32 in a half model: lint's first example
EOF
cd "$work"
# the inputs file is written by the dev interpreter: reading it is what the wheel must do
"$PY" -c 'import torch; from safetensors.torch import save_file
g = torch.Generator().manual_seed(0)
save_file({"batch0.0": torch.randn(4, 16, generator=g)}, "inputs.safetensors")'

"$venv_py" -c 'import halfprec' || fail "import halfprec failed in a venv with no extras"
"$work/venv/bin/halfprec" --help >/dev/null || fail "halfprec --help failed"
rc=0
lint_out=$("$work/venv/bin/halfprec" lint leaky.py 2>&1) || rc=$?
if [ "$rc" -ne 1 ] || [[ "$lint_out" != *"leaky.py:7:"* ]]; then
  fail "halfprec lint leaky.py exited $rc without a finding on line 7: $lint_out"
fi
rc=0
check_out=$("$work/venv/bin/halfprec" check model.py:build --inputs inputs.safetensors \
  --dtype bf16 --device cpu --runs 1 2>&1) || rc=$?
if [ "$rc" -ne 0 ] || [[ "$check_out" != *PASS* ]]; then
  fail "halfprec check model.py:build exited $rc without a PASS: $check_out"
fi
echo "wheel-check: the wheel installs with its declared dependencies and runs" \
  "import, --help, lint and check"
