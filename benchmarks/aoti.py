"""Ahead-of-time compilation of a halfprec model with AOTInductor: what it costs at build
time, at load time, and whether the package still matches fp32.

    PYTHONPATH=src python3 benchmarks/aoti.py              # dynamic batch dimension
    PYTHONPATH=src python3 benchmarks/aoti.py --static     # the example's shapes only

A 256-1024-256 Linear/LayerNorm block is converted to bf16 with ``halfprec.convert``,
exported with ``torch.export.export``, compiled with
``torch._inductor.aoti_compile_and_package`` (inductor freezing on) and loaded with
``torch._inductor.aoti_load_package``. Prints the seconds of each step, then for several
batch sizes whether the package's output is within bf16 tolerance of fp32 and how far it is
from the eager converted model. The package goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn

import halfprec
from halfprec.compare import compare_outputs
from halfprec.timing import now


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(256, 1024)
        self.norm = nn.LayerNorm(1024)
        self.down = nn.Linear(1024, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.norm(self.up(x))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--static", action="store_true", help="export without dynamic_shapes")
    args = parser.parse_args()
    model = Block().eval()
    x = torch.randn(32, 256)
    half = halfprec.convert(model, "bf16")
    dynamic = None if args.static else {"x": {0: torch.export.Dim("batch", min=1, max=1024)}}
    with tempfile.TemporaryDirectory() as tmp:
        start = now()
        with torch.no_grad():
            ep = torch.export.export(half, (x,), dynamic_shapes=dynamic)
        exported = now()
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=str(Path(tmp) / "block.pt2"), inductor_configs={"freezing": True}
        )
        compiled = now()
        served = torch._inductor.aoti_load_package(path)
        loaded = now()
        print(
            f"export {exported - start:.1f} s, compile {compiled - exported:.1f} s, "
            f"load {loaded - compiled:.2f} s"
        )
        for n in (32,) if args.static else (1, 7, 32, 300):
            xn = torch.randn(n, 256)
            with torch.no_grad():
                ref, out, eager = model(xn), served(xn), half(xn)
            ok = compare_outputs([ref], [out], dtype=torch.bfloat16).passed
            diff = (out - eager).abs().max().item()
            print(f"batch {n}: within bf16 tolerance of fp32: {ok}; max |aoti - eager| {diff:g}")


if __name__ == "__main__":
    main()
