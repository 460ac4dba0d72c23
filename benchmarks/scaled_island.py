"""What a scaled op island costs against an fp32 op island: the Gram-matrix hazard of
testbed.heldout_sums (``F @ F^T / (C*H*W)``, whose product overflows fp16) at a larger
size, timed in one interleaved run.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/scaled_island.py \
        [--channels 64] [--size 64] [--batch 2] [--rounds 15] [--dtypes fp16,bf16]

``tune`` finds the fix (on fp16: the matmul as a scaled island); the script then converts
the model with that op island as ``kind="fp32"`` and as ``kind="scaled"`` in each dtype and
times them with the fp32 model, every round calling each variant once. It prints each
variant's median, its fp32 share of FLOPs, its SQNR against fp32, and its speed against
the fp32 island with the spread of the per-round ratios. On a CPU without native half
GEMMs (half emulated) the scaled island's half GEMM can be slower than the fp32 one it
replaces; the FLOP share is what carries over to hardware with fast half GEMMs.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch
from torch import nn

from halfprec import Recipe, convert, tune
from halfprec.batch import call
from halfprec.bench.machine import machine_info
from halfprec.dtypes import dtype_name, parse_dtype
from halfprec.flops import fp32_flops_share
from halfprec.timing import measure_interleaved, ratio_of, spread_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed.heldout_sums import Gram  # noqa: E402


class Style(nn.Module):
    """StyleFeatures of testbed.heldout_sums with ``channels`` conv channels."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.gram = Gram()
        with torch.no_grad():
            self.conv.weight.mul_(12.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.gram(torch.relu(self.conv(image)))  # type: ignore[no-any-return]


def _sqnr(ref: torch.Tensor, out: torch.Tensor) -> float:
    noise = (out.float() - ref).pow(2).sum()
    return float(10 * torch.log10(ref.pow(2).sum() / noise)) if noise > 0 else float("inf")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dtypes", default="fp16,bf16")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Style(args.channels).eval()
    g = torch.Generator().manual_seed(1)
    batch = (torch.rand(args.batch, 3, args.size, args.size, generator=g) * 2.0,)
    found = tune(model, [batch], "fp16")
    if found.recipe is None or not found.recipe.op_islands:
        print(f"scaled_island.py: tune found no op island ({found.report.reason})", file=sys.stderr)
        return 1
    refs = found.recipe.op_islands
    print(f"tune fp16: {', '.join(str(r) for r in refs)}")
    names, models = ["fp32"], [model]
    for dt in (parse_dtype(d) for d in args.dtypes.split(",")):
        for kind in ("fp32", "scaled"):
            ops = tuple(r.with_kind(kind) for r in refs)
            names.append(f"{dtype_name(dt)} {kind} island")
            models.append(convert(model, Recipe(dt, op_islands=ops)))
    with torch.inference_mode():
        ref = call(model, batch)
        outs = [call(m, batch) for m in models]
        timed = measure_interleaved([partial(call, m, batch) for m in models], runs=args.rounds)
    k = args.size**2
    op_flops = {r: 2 * args.batch * args.channels**2 * k for r in refs}  # the Gram matmul
    info = machine_info()
    native = [f for f, on in info.features.items() if on] or ["no AMX/AVX512 half"]
    where = f"{info.name} ({', '.join(native)}), torch {info.torch_version}"
    print(f"\n{where}, {info.threads} thread(s)")
    print(f"Style({args.channels}) on {tuple(batch[0].shape)}, Gram K = {k}, {args.rounds} rounds")
    print("| variant | median | fp32 FLOPs | SQNR vs fp32 | against the fp32 island |")
    print("|---|---|---|---|---|")
    for i, (name, m, out, t) in enumerate(zip(names, models, outs, timed, strict=True)):
        share = 1.0 if i == 0 else fp32_flops_share(model, m, batch, op_flops) or 0.0
        against = spread_text(ratio_of(timed[i - 1], t)) if "scaled" in name else "-"
        sqnr = f"{_sqnr(ref, out):.1f} dB" if i else "-"
        print(f"| {name} | {1e3 * t.median:.2f} ms | {100 * share:.1f}% | {sqnr} | {against} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
