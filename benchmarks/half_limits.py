"""What deploy's probe and GEMM limit read for each half dtype on this machine, without
building any variant: the model's recorded products, the probe's verdict, the limit's ratio
at the model's own products, and why each dtype would be skipped.

    PYTHONPATH=src:benchmarks HF_HUB_OFFLINE=1 python3 benchmarks/half_limits.py \
        benchmarks/unseen_models.py:mobilevit [--threads 2]
"""

from __future__ import annotations

import argparse

import torch

from halfprec.batch import resize_batch
from halfprec.bench.half_speed import HalfSpeed
from halfprec.bench.limit import gemm_shapes, probe_gemm
from halfprec.bench.results import BenchConfig
from halfprec.dtypes import device_support, dtype_name
from halfprec.io.specs import load_model
from halfprec.timing import now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="builtin:NAME, FILE.py:NAME or a directory")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    model, batch = loaded.model.eval(), loaded.example_inputs[0]
    if args.batch is not None:
        batch = resize_batch(batch, args.batch)
    shapes = gemm_shapes(model, batch)
    print(f"{len(shapes)} products; the probe's: {probe_gemm(shapes)}")
    support = device_support("cpu")
    speed = HalfSpeed(
        torch.device("cpu"),
        [torch.bfloat16, torch.float16],
        BenchConfig(probe_cache=False),
        support=support,
    )
    start = now()
    speed.probe(shapes)
    probed = now() - start
    limits = speed.limits(shapes)
    print(f"probe {probed:.2f} s, limit {now() - start - probed:.2f} s; {support.name}")
    for dtype in speed.dtypes:
        lim = limits.get(dtype)
        slow = speed.slowdowns.get(dtype)
        print(
            f"{dtype_name(dtype)}: fast kernels {support.fast(dtype)}; probe "
            f"{'-' if slow is None else f'{slow:.1f}x slower'}; own products "
            f"{'-' if lim is None or lim.method != 'gemm' else f'{1 / lim.ratio:.1f}x slower'}; "
            f"{speed.skips.get(dtype, 'timed')}"
        )


if __name__ == "__main__":
    main()
