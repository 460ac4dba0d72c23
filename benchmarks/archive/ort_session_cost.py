"""What the onnxruntime target's call path costs now that it runs through ``OnnxSession``
(feeds by name with a dtype and shape check per input, errors turned into one line),
against the inline path it had before (a raw ``InferenceSession``, numpy feeds, no checks).

Both open the same fp32 export with the same options (``threads`` intra-op threads, one
inter-op thread, the CPU provider). Every round times ``--calls`` calls of each path, in
an order that alternates from round to round; the table gives each path's median time
per call, the ratio of the per-round times (OnnxSession / inline: above 1 means the
wrapper is slower) with its interquartile range, and the median difference per call.
``--clock thread`` times the calling thread's CPU time (with ``OMP_NUM_THREADS=1`` and one
intra-op thread onnxruntime runs in the calling thread), leaving out the time other jobs
held the core on a shared machine.

    OMP_NUM_THREADS=1 PYTHONPATH=src python3 benchmarks/archive/ort_session_cost.py [--rounds 15]
        [--calls 200] [--threads 1] [--batches 1,32] [--clock wall|thread]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from halfprec.bench.machine import machine_info
from halfprec.export.onnx import PROVIDERS, OnnxSession, import_onnxruntime
from halfprec.runtimes import ort
from halfprec.timing import Timing, now, ratio_of

Path_ = Callable[[list[torch.Tensor]], list[torch.Tensor]]


class _Mlp(nn.Module):
    """Two inputs (features and a bias row), two outputs: a small graph whose call is
    mostly feeding and fetching."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 16)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.up(x))
        return {"out": self.down(h) + bias, "hidden": h}


def _paths(folder: Path, rows: int, threads: int) -> tuple[Path_, Path_, list[torch.Tensor]]:
    batch = {"x": torch.randn(rows, 64), "bias": torch.randn(1, 16)}
    built = ort.build(_Mlp().eval(), batch, threads)
    path = built.save(folder / f"mlp{rows}.onnx")
    names = list(built.input_names)

    session = OnnxSession(path, threads=threads)

    def wrapped(tensors: list[torch.Tensor]) -> list[torch.Tensor]:  # runtimes/ort.py now
        return session.run_list(session.feeds(dict(zip(names, tensors, strict=True))))

    onnxruntime = import_onnxruntime()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.log_severity_level = 3
    raw = onnxruntime.InferenceSession(str(path), options, providers=list(PROVIDERS))
    outputs = [o.name for o in raw.get_outputs()]
    feeds_at = [(n, i) for i, n in enumerate(names)]

    def inline(tensors: list[torch.Tensor]) -> list[torch.Tensor]:  # runtimes/ort.py before
        feeds = {n: tensors[i].detach().cpu().numpy() for n, i in feeds_at}
        return [torch.from_numpy(r) for r in raw.run(outputs, feeds)]

    tensors = [batch[n] for n in names]
    for got, want in zip(wrapped(tensors), inline(tensors), strict=True):
        assert torch.equal(got, want)  # the same graph, the same outputs
    return wrapped, inline, tensors


CLOCKS: dict[str, Callable[[], float]] = {"wall": now, "thread": time.thread_time}


def _time(
    path: Path_, tensors: list[torch.Tensor], calls: int, clock: Callable[[], float]
) -> float:
    start = clock()
    for _ in range(calls):
        path(tensors)
    return (clock() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    clock = CLOCKS[args.clock]
    info = machine_info()
    print(f"# {info.summary()}; intra-op threads {args.threads}; clock {args.clock}")
    print("| batch | OnnxSession us/call | inline us/call | OnnxSession/inline (IQR) | +us/call |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="halfprec-bench-") as tmp:
        for rows in (int(b) for b in args.batches.split(",")):
            wrapped, inline, tensors = _paths(Path(tmp), rows, args.threads)
            for path in (wrapped, inline):
                _time(path, tensors, args.calls, clock)  # warm-up
            samples: dict[str, list[float]] = {"wrapped": [], "inline": []}
            for r in range(args.rounds):
                order = [("wrapped", wrapped), ("inline", inline)]
                for name, path in order if r % 2 == 0 else order[::-1]:
                    samples[name].append(_time(path, tensors, args.calls, clock))
            w, i = Timing(tuple(samples["wrapped"])), Timing(tuple(samples["inline"]))
            ratio = ratio_of(w, i)  # per round, wrapped time / inline time
            extra = [a - b for a, b in zip(w.samples, i.samples, strict=True)]
            print(
                f"| {rows} | {w.median * 1e6:.1f} | {i.median * 1e6:.1f} | "
                f"{ratio.median:.3f} ({ratio.q1:.3f}-{ratio.q3:.3f}) | "
                f"{statistics.median(extra) * 1e6:+.1f} |"
            )


if __name__ == "__main__":
    main()
