"""Peak memory of loading and converting half checkpoints, each case in a fresh process.

    PYTHONPATH=src python3 benchmarks/memory.py            # all three cases
    PYTHONPATH=src python3 benchmarks/memory.py load       # one of: load, stream, convert_

- ``load``: BERT-base. Peak RSS growth (VmHWM after the call minus VmRSS before, the peak
  counter reset through /proc/self/clear_refs) of ``halfprec.load(path, into=callable)``
  against the half file's size, next to ``load(path, into=BertModel(cfg))``.
- ``stream``: an fp32 checkpoint of ~2 GB (a BertConfig with hidden 1024 and 40 layers,
  written tensor by tensor with random values, so writing it costs no memory either),
  converted to bf16 file-to-file with ``convert_file``. Peak RSS growth in MB.
- ``convert_``: MiniLM's resident memory after ``convert_`` against what the half model
  needs, before and after ``malloc_trim``.

Prints ratios and MB; the temporary files are deleted.
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MB = 2**20


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _trim() -> None:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _bert_config(big: bool = False):  # type: ignore[no-untyped-def]
    import transformers as tf

    if big:
        return tf.BertConfig(
            hidden_size=1024, num_hidden_layers=40, intermediate_size=4096, num_attention_heads=16
        )
    return tf.BertConfig()


def _warm_imports() -> None:
    """Build and convert a tiny BERT once: the lazy imports it triggers (transformers'
    modeling code, halfprec's loaders) are not the cost being measured."""
    import transformers as tf

    import halfprec
    from halfprec.io import materialize, stream  # noqa: F401

    tiny = tf.BertConfig(
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        vocab_size=16,
    )
    halfprec.convert(tf.BertModel(tiny), "bf16")


def child_load(path: str, how: str) -> None:
    import transformers as tf

    import halfprec

    cfg = _bert_config()
    _warm_imports()
    _trim()
    _reset_peak()
    before = _kib("VmRSS")
    if how == "callable":
        model = halfprec.load(path, into=lambda: tf.BertModel(cfg))
    else:
        model = halfprec.load(path, into=tf.BertModel(cfg))
    peak = _kib("VmHWM") - before
    assert model is not None
    print(peak)


def child_stream(src: str, dst: str) -> None:
    import transformers as tf

    from halfprec.io.stream import convert_file

    cfg = _bert_config(big=True)
    _warm_imports()
    _trim()
    _reset_peak()
    before = _kib("VmRSS")
    convert_file(src, dst, lambda: tf.BertModel(cfg), "bf16")
    print(_kib("VmHWM") - before)


def child_convert() -> None:
    import torch

    import halfprec
    from halfprec.io.zoo import BUILTINS

    model, _ = BUILTINS["minilm"].build()
    halfprec.convert(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)), "bf16")
    _trim()
    start = {f: _kib(f) for f in ("VmRSS", "RssAnon", "RssFile")}
    fp32_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    halfprec.convert_(model, "bf16")
    half_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    _trim()
    end = {f: _kib(f) for f in start}
    growth = ", ".join(f"{f} {(end[f] - start[f]) / MB:+.0f} MB" for f in start)
    print(
        f"minilm convert_ fp32 {fp32_bytes / MB:.0f} MB -> bf16 {half_bytes / MB:.0f} MB: "
        f"{growth} (from_pretrained maps the file; RssFile counts the pages conversion read)"
    )


def _run(*args: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode:
        raise SystemExit(f"{args}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip().splitlines()[-1]


def bench_load(tmp: Path) -> None:
    import torch
    import transformers as tf

    import halfprec

    torch.manual_seed(0)
    path = tmp / "bert-base-bf16.safetensors"
    halfprec.save(halfprec.convert(tf.BertModel(_bert_config()).eval(), "bf16"), path)
    size = path.stat().st_size
    for how in ("callable", "built"):
        peak = int(_run("child-load", str(path), how))
        print(
            f"load(into={how}) BERT-base: peak RSS growth {peak / MB:.0f} MB = "
            f"{peak / size:.2f}x the half file ({size / MB:.0f} MB)"
        )


def _write_big_fp32(path: Path) -> int:
    import torch
    import transformers as tf

    from halfprec.io.materialize import build_on_meta
    from halfprec.io.tensorfile import TensorWriter

    cfg = _bert_config(big=True)
    model = build_on_meta(lambda: tf.BertModel(cfg))
    specs = {
        n: (torch.float32, tuple(p.shape))
        for n, p in model.state_dict().items()
        if p.is_floating_point()
    }
    gen = torch.Generator().manual_seed(0)
    with path.open("wb") as f:
        writer = TensorWriter(f, specs)
        for name, (_, shape) in specs.items():
            writer.write(name, torch.randn(shape, generator=gen) * 0.02)
        writer.close()
    return path.stat().st_size


def bench_stream(tmp: Path) -> None:
    src, dst = tmp / "big-fp32.safetensors", tmp / "big-bf16.safetensors"
    size = _write_big_fp32(src)
    peak = int(_run("child-stream", str(src), str(dst)))
    print(
        f"stream fp32 {size / MB:.0f} MB -> bf16 {dst.stat().st_size / MB:.0f} MB: "
        f"peak RSS growth {peak / MB:.0f} MB ({peak / size:.3f}x the input)"
    )


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "child-load":
        return child_load(args[1], args[2])
    if args and args[0] == "child-stream":
        return child_stream(args[1], args[2])
    if args and args[0] == "child-convert":
        return child_convert()
    cases = args or ["load", "stream", "convert_"]
    with tempfile.TemporaryDirectory() as d:
        for case in cases:
            if case == "load":
                bench_load(Path(d))
            elif case == "stream":
                bench_stream(Path(d))
            elif case == "convert_":
                print(_run("child-convert"))
            else:
                raise SystemExit(f"unknown case {case!r}; use load, stream or convert_")
    return None


if __name__ == "__main__":
    main()
