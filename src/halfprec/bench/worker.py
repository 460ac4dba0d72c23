"""Peak CPU memory of one variant, measured in a clean subprocess.

``python -m halfprec.bench.worker --model SPEC --variant NAME --batch-size N`` loads the
model, builds the variant in place (no fp32 copy stays resident), runs one warm-up call
(which may compile), then resets the kernel's peak-RSS counter and runs one more call. It
prints JSON: ``peak_rss`` (bytes resident at the peak of that call), ``baseline_rss``
(resident just before it) and ``delta`` (their difference: activations and workspace),
plus ``ru_maxrss`` (the whole process's peak, model loading included).

The peak counter is reset through ``/proc/self/clear_refs`` (Linux); elsewhere the worker
falls back to ``ru_maxrss`` and says so in ``method``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from halfprec.bench.variants import Variant
from halfprec.convert.recipe import Recipe

_TIMEOUT_S = 600
_POLL_S = 0.1  # how often a running worker's ``stop`` is asked

Stop = Callable[[], "str | None"]
"""Asked while a memory worker runs: None to let it run, else why it is stopped."""


@dataclass(frozen=True)
class MemoryUse:
    """Peak memory of one variant. ``delta_bytes``: above the resident model and inputs."""

    peak_bytes: int
    delta_bytes: int
    method: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _status_kib(field: str) -> int | None:
    return _status_kib_of(Path("/proc/self/status"), field)


def _status_kib_of(path: Path, field: str) -> int | None:
    """A ``Field:   N kB`` line of a /proc file, in KiB (None where absent)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _trim() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _ru_maxrss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _run(spec: str, variant_name: str, batch_size: int, config: Recipe) -> dict[str, Any]:
    import torch

    from halfprec.batch import call, resize_batch
    from halfprec.bench.variants import build_variant
    from halfprec.fp32 import exact_fp32
    from halfprec.io.specs import load_model

    loaded = load_model(spec)
    if not loaded.example_inputs:
        raise SystemExit(f"{spec} has no example inputs")
    batch = resize_batch(loaded.example_inputs[0], batch_size)
    module = build_variant(loaded.model, Variant.parse(variant_name), config, in_place=True)
    with torch.inference_mode(), exact_fp32():
        call(module, batch)
        _trim()
        reset = _reset_peak()
        baseline = (_status_kib("VmRSS") or 0) * 1024
        call(module, batch)
    peak_kib = _status_kib("VmHWM") if reset else None
    peak = peak_kib * 1024 if peak_kib is not None else _ru_maxrss_bytes()
    return {
        "peak_rss": peak,
        "baseline_rss": baseline,
        "delta": max(0, peak - baseline),
        "ru_maxrss": _ru_maxrss_bytes(),
        "method": "rss subprocess" if reset else "ru_maxrss subprocess (includes loading)",
    }


def measure_in_subprocess(
    spec: str,
    variant: Variant,
    batch_size: int,
    config: Recipe | None = None,
    stop: Stop | None = None,
) -> MemoryUse:
    """Run the worker for ``variant`` on MODEL ``spec``; failures come back as a note.
    ``config`` reaches the worker as a recipe file, less what JSON cannot hold (type
    selectors and ``filter_fn``). ``stop()``: asked every :data:`_POLL_S` while the
    worker runs; once it returns a reason (a time budget spent), the worker and every
    process it started are killed (it runs in a process group of its own) and waited
    for, its recipe file is removed, and the reason comes back as the note."""
    why = None if stop is None else stop()
    if why is not None:  # not started
        return MemoryUse(0, 0, "failed", why)
    config = config or Recipe()
    portable = config.replace(
        keep_fp32=tuple(k for k in config.keep_fp32 if isinstance(k, str)), filter_fn=None
    )
    args = [
        sys.executable,
        "-m",
        "halfprec.bench.worker",
        "--model",
        spec,
        "--variant",
        variant.name,
        "--batch-size",
        str(batch_size),
    ]
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        path = f.name
    portable.save(path)
    args += ["--recipe", path]
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    try:
        done = _run_worker(args, env, stop or (lambda: None))
    finally:
        os.unlink(path)
    if isinstance(done, str):
        return MemoryUse(0, 0, "failed", done)
    code, out, err = done
    if code != 0:
        tail = (err.strip().splitlines() or ["no output"])[-1][:200]
        return MemoryUse(0, 0, "failed", f"worker exit {code}: {tail}")
    data = json.loads(out.strip().splitlines()[-1])
    return MemoryUse(int(data["peak_rss"]), int(data["delta"]), str(data["method"]))


def _run_worker(args: list[str], env: dict[str, str], stop: Stop) -> tuple[int, str, str] | str:
    """The worker's exit code, stdout and stderr; or, where ``stop()`` gave a reason or it
    ran past :data:`_TIMEOUT_S`, why it was killed (its process group: a compiling worker's
    own compile workers too)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            args, stdout=out, stderr=err, text=True, env=env, start_new_session=True
        )
        start, why = time.monotonic(), None
        while proc.poll() is None:
            why = stop()
            if why is None and time.monotonic() - start > _TIMEOUT_S:
                why = f"worker ran over {_TIMEOUT_S} s"
            if why is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return why
            time.sleep(_POLL_S)
        with contextlib.suppress(ProcessLookupError):  # anything it left running
            os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read()


_WORKER_OVERHEAD = 2**30  # a worker's interpreter, torch and libraries, resident


def parallel_workers(
    model_bytes: int, jobs: int, available_kib: int | None = -1, cores: int | None = None
) -> int:
    """How many memory workers run at once: one per core (``cores``, default the machine's;
    at most 2: a worker's import is single-threaded, its calls use every core), never more
    than ``jobs``, and only as many as fit twice over in the memory available
    (``available_kib``, default ``/proc/meminfo``'s MemAvailable; each worker holds the
    fp32 model while it builds its variant); 1 where that cannot be read (None)."""
    want = max(1, min(2, cores or os.cpu_count() or 1, jobs))
    available = available_kib
    if available == -1:
        available = _status_kib_of(Path("/proc/meminfo"), "MemAvailable")
    if available is None:
        return 1
    each = 2 * (2 * model_bytes + _WORKER_OVERHEAD)
    return max(1, min(want, available * 1024 // each))


def measure_in_subprocesses(
    spec: str,
    jobs: Sequence[tuple[Variant, int]],
    config: Recipe | None = None,
    workers: int = 1,
    stop: Stop | None = None,
) -> list[MemoryUse]:
    """:func:`measure_in_subprocess` for each ``(variant, batch_size)`` of ``jobs``, up to
    ``workers`` at once (each a process of its own, measuring its own peak), in order;
    ``stop`` as there (a worker not yet started when it gives a reason is not started)."""
    if workers <= 1 or len(jobs) <= 1:
        return [measure_in_subprocess(spec, v, size, config, stop) for v, size in jobs]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(measure_in_subprocess, spec, v, size, config, stop) for v, size in jobs
        ]
        return [f.result() for f in futures]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m halfprec.bench.worker")
    parser.add_argument("--model", required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--recipe", default=None, help="a recipe file (Recipe.save)")
    ns = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = Recipe.load(ns.recipe) if ns.recipe else Recipe()
    data = _run(ns.model, ns.variant, ns.batch_size, config)
    print(json.dumps(data))


if __name__ == "__main__":
    main()
