"""What the default op policy costs: naive half, autocast, and convert with and without
the policy, timed in one interleaved run (issue 21's latency acceptance: convert's
default at most 1.05x naive half).

Per case and dtype, every round calls each variant once, in an order that rotates from
round to round; the table gives each variant's median with its interquartile range, its
cosine against fp32, and the ratios of the per-round times with their IQR:

- half (default): naive ``.to(dtype)``, autocast, convert with the default recipe and
  convert without the op policy (``--no-op-policy``: ``fp32_ops=()``, ``fp32_inputs=False``,
  so no mode at all): each against naive, and the policy's own cost per forward (convert
  default minus convert without it, per round, in us);
- ``--no-half``: the fp32 model, the fp32 model under the policy's TorchFunctionMode
  (which then casts nothing) and under an empty TorchFunctionMode (the floor of any
  Python mode): each against fp32, and its cost per forward in us. On a CPU whose half
  kernels are emulated (this one: MiniLM b32 ~6x slower than fp32) the half variants hide the
  mode's cost, so this is the number that carries over to a fast-bf16 CPU or a GPU.

``--clock thread`` times the calling thread's CPU time instead of the wall clock: on a
shared machine, with one thread (``OMP_NUM_THREADS=1``), it leaves out the time other
jobs held the core. ``calls`` is how many torch calls one forward makes, and ``through
the mode`` how many of them pass through the policy's ``__torch_function__`` (a built-in
leaf module runs with the mode set aside): the cost per forward is about that many times
the cost per call.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/op_policy_cost.py [--rounds 15]
        [--only minilm-b32,minilm-b1,bert-base] [--dtypes bf16,fp16] [--no-half]
        [--clock wall|thread] [--minilm-batch 32] [--bert-batch 8] [--bert-seq 128]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import halfprec
from halfprec.batch import call, resize_batch
from halfprec.bench.machine import machine_info
from halfprec.convert.op_policy import Fp32OpsMode
from halfprec.io.zoo import BUILTINS, token_batch
from halfprec.timing import now
from halfprec.tree import flatten, map_tensors

Variant = Callable[[Any], Any]


class _Empty(TorchFunctionMode):
    """Passes every call straight on: what any Python mode costs at least."""

    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        return func(*args, **kwargs) if kwargs else func(*args)


def _naive(model: nn.Module, dtype: torch.dtype) -> Variant:
    naive = copy.deepcopy(model).to(dtype)

    def run(batch: Any) -> Any:
        cast = map_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, batch)
        return call(naive, cast)

    return run


def _autocast(model: nn.Module, dtype: torch.dtype) -> Variant:
    device = next(model.parameters()).device.type

    def run(batch: Any) -> Any:
        with torch.autocast(device, dtype=dtype):
            return call(model, batch)

    return run


def _under(model: nn.Module, mode: Callable[[], TorchFunctionMode]) -> Variant:
    def run(batch: Any) -> Any:
        with mode():
            return call(model, batch)

    return run


def _variants(model: nn.Module, dtype: torch.dtype, half: bool) -> dict[str, Variant]:
    if not half:
        ops = frozenset(halfprec.Recipe().fp32_ops)
        return {
            "fp32": lambda b: call(model, b),
            "fp32 under the policy's mode": _under(model, lambda: Fp32OpsMode(dtype, ops)),
            "fp32 under an empty mode": _under(model, _Empty),
        }
    off = halfprec.convert(model, halfprec.Recipe(dtype, fp32_ops=(), fp32_inputs=False))
    default = halfprec.convert(model, dtype)
    return {
        "naive": _naive(model, dtype),
        "autocast": _autocast(model, dtype),
        "convert, no op policy": lambda b: call(off, b),
        "convert (default)": lambda b: call(default, b),
    }


def _cosine(ref: Any, out: Any) -> float:
    r, o = flatten(ref), flatten(out)
    key = next(k for k in r if r[k].is_floating_point())
    a, b = r[key].double().flatten(), o[key].double().flatten()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


CLOCKS: dict[str, Callable[[], float]] = {"wall": now, "thread": time.thread_time}


def _time(
    variants: dict[str, Variant], batch: Any, rounds: int, clock: Callable[[], float]
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Each round calls every variant once, starting one further along the list."""
    names = list(variants)
    times: dict[str, list[float]] = {k: [] for k in names}
    outs: dict[str, Any] = {}
    for fn in variants.values():
        fn(batch)  # warm-up
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            t0 = clock()
            outs[k] = variants[k](batch)
            times[k].append(clock() - t0)
    return times, outs


def _cases(args: argparse.Namespace) -> list[tuple[str, nn.Module, Any]]:
    wanted = args.only.split(",")
    cases: list[tuple[str, nn.Module, Any]] = []
    if {"minilm-b32", "minilm-b1"} & set(wanted):
        minilm, batches = BUILTINS["minilm"].build()
        for key, size in (("minilm-b32", args.minilm_batch), ("minilm-b1", 1)):
            if key in wanted:
                cases.append((f"MiniLM b{size}", minilm, resize_batch(batches[0], size)))
    if "bert-base" in wanted:
        bert, _ = BUILTINS["bert-base"].build()
        size = f"b{args.bert_batch}x{args.bert_seq}"
        batch = token_batch(30522, args.bert_batch, args.bert_seq)
        cases.append((f"BERT-base {size}", bert, batch))
    return cases


def _ratio(case: str, top: str, bottom: str, times: dict[str, list[float]]) -> str:
    """``top / bottom`` per round, and ``top - bottom`` per round in us."""
    pairs = list(zip(times[top], times[bottom], strict=True))
    lo, mid, hi = _quartiles([a / b for a, b in pairs])
    dlo, dmid, dhi = _quartiles([1e6 * (a - b) for a, b in pairs])
    return (
        f"| {case} | {top} / {bottom} | **{mid:.3f}** | {lo:.3f}-{hi:.3f} "
        f"| {dmid:+.0f} | {dlo:+.0f} to {dhi:+.0f} |"
    )


def _calls(run: Variant, batch: Any) -> int:
    """How many torch calls ``run`` hands on from under its mode (an outer mode sees each
    call the inner one passes on, none of the inner one's own)."""
    with _Empty() as counter:
        run(batch)
    return counter.calls


def _through_the_mode(run: Variant, batch: Any) -> int:
    """How many calls of one ``run(batch)`` the policy's ``__torch_function__`` handles
    (its frames, counted by a profile function)."""
    code = Fp32OpsMode.__torch_function__.__code__
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += event == "call" and frame.f_code is code

    sys.setprofile(profile)
    try:
        run(batch)
    finally:
        sys.setprofile(None)
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--only", default="minilm-b32,minilm-b1,bert-base")
    parser.add_argument("--minilm-batch", type=int, default=32)
    parser.add_argument("--bert-batch", type=int, default=8)
    parser.add_argument("--bert-seq", type=int, default=128)
    parser.add_argument("--no-half", action="store_true", help="only the mode's own cost")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="thread: CPU time of this thread, steadier on a shared machine (one thread only)",
    )
    args = parser.parse_args()
    print(machine_info().summary(), f"clock: {args.clock}")
    print("| case | dtype | variant | median ms | IQR ms | cosine vs fp32 |")
    print("|---|---|---|---|---|---|")
    ratios: list[str] = []
    for label, model, batch in _cases(args):
        with torch.inference_mode():
            reference = call(model, batch)
        for name in args.dtypes.split(","):
            dtype = halfprec.dtypes.parse_dtype(name)
            variants = _variants(model, dtype, half=not args.no_half)
            policy = next(k for k in variants if "policy's mode" in k or "default" in k)
            with torch.inference_mode():
                times, outs = _time(variants, batch, args.rounds, CLOCKS[args.clock])
                calls = _calls(variants[policy], batch)
                through = _through_the_mode(variants[policy], batch)
            for k, ts in times.items():
                lo, mid, hi = _quartiles(ts)
                cos = _cosine(reference, outs[k])
                spread = f"{1e3 * lo:.1f}-{1e3 * hi:.1f}"
                print(f"| {label} | {name} | {k} | {1e3 * mid:.1f} | {spread} | {cos:.6f} |")
            base, *others = times
            case = f"{label} {name}, {calls} calls, {through} through the mode"
            ratios += [_ratio(case, k, base, times) for k in others]
            if "convert (default)" in times:  # the policy's own share
                ratios.append(_ratio(case, "convert (default)", "convert, no op policy", times))
    print()
    print("| case | ratio | median | IQR | difference per forward, us | IQR, us |")
    print("|---|---|---|---|---|---|")
    print("\n".join(ratios))


if __name__ == "__main__":
    main()
