"""Page faults and CPU time per eager fp32 call, with and without a half copy alive.

``HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/fp32_faults.py builtin:bert-base --batch 8``
calls the model's eager fp32 forward ``--calls`` times in a row (after two untimed calls),
then again while a bf16 copy of it (built after those calls, so its weights lie above
fp32's activations on the heap) is alive, then again once the copy is dropped; and prints,
for each phase, the median minor page faults, CPU seconds (all threads) and kernel seconds
per call. Page faults and CPU time depend far less than wall time on other processes' load,
so this runs on a shared machine; ``--threads 1`` removes a waiting thread's spin from the
CPU time. It shows how much of fp32's cost is its allocator's (docs/bench.md, "Why most
rounds at the end").
"""

from __future__ import annotations

import argparse
import copy
import resource
import statistics
from collections.abc import Callable
from typing import Any

import torch

from halfprec.batch import call, resize_batch
from verify_choice import _load, _model


def _phase(label: str, fn: Callable[[], Any], calls: int) -> None:
    rows = []
    for _ in range(calls):
        a = resource.getrusage(resource.RUSAGE_SELF)
        fn()
        b = resource.getrusage(resource.RUSAGE_SELF)
        cpu = b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime
        rows.append((b.ru_minflt - a.ru_minflt, cpu, b.ru_stime - a.ru_stime))
    faults, cpu, sys_ = (statistics.median(r[i] for r in rows) for i in range(3))
    print(
        f"{label:24s} {faults:8.0f} faults, CPU {cpu * 1e3:8.1f} ms (kernel {sys_ * 1e3:6.1f} ms)"
        f" per call; faults per call {[r[0] for r in rows]}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="mlp, or a MODEL spec (builtin:bert-base, ...)")
    parser.add_argument("--batch", type=int, default=None, help="rows per batch")
    parser.add_argument("--calls", type=int, default=6, help="timed calls per phase")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"load average before: {_load()}; torch threads {torch.get_num_threads()}")
    model, batch = _model(args.model)
    if args.batch is not None:
        batch = resize_batch(batch, args.batch)
    with torch.inference_mode():
        fp32 = lambda: call(model, batch)  # noqa: E731
        fp32()
        fp32()
        _phase("fp32 alone", fp32, args.calls)
        half = copy.deepcopy(model).to(torch.bfloat16)
        _phase("fp32, a bf16 copy alive", fp32, args.calls)
        del half
        _phase("fp32, the copy dropped", fp32, args.calls)
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
