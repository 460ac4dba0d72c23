"""Loading a bf16 checkpoint: ``halfprec.load(path, into=builder)`` against transformers'
``from_pretrained(dir, dtype=torch.bfloat16)``, on the same file, each in a fresh process.

    PYTHONPATH=src python3 benchmarks/load_memory.py              # BERT-base
    PYTHONPATH=src python3 benchmarks/load_memory.py bert llama   # and a ~1.2B Llama

For each model, the parent writes random fp32 weights tensor by tensor (never a whole model
in memory) and converts them to halfprec's bf16 file with ``convert_file``; that file is
``model.safetensors`` of a Hugging Face directory (with ``config.json``), so both loaders
read the very same bytes. Each child process imports everything and loads a tiny model both
ways first (lazy imports are not the cost measured), resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``), loads, then reads every byte of every parameter and buffer (so
that a memory-mapped load pays for its pages too), and prints:

- peak: ``VmHWM`` minus ``VmRSS`` before the load (``/proc/self/status``; not
  ``ru_maxrss``, which a child inherits from its forking parent);
- the seconds of the load alone, and of load plus the read of every byte.

The loaders run alternately, ``--runs`` times each (default 3), and the medians are
printed with their range. The temporary files are deleted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from memory import _kib as _status  # benchmarks/memory.py: a field of /proc/self/status

MB = 2**20


def _config(name: str) -> Any:
    import transformers as tf

    if name == "bert":
        return tf.BertConfig(architectures=["BertModel"])
    if name == "llama":  # Llama-3.2-1B's shape: 1.24B parameters, tied embeddings
        return tf.LlamaConfig(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            tie_word_embeddings=True,
            architectures=["LlamaForCausalLM"],
        )
    if name == "tiny":
        return tf.BertConfig(
            hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
            vocab_size=16, architectures=["BertModel"],
        )  # fmt: skip
    raise SystemExit(f"unknown model {name!r}; use bert or llama")


def _model_class(config: Any) -> Any:
    import transformers as tf

    return getattr(tf, config.architectures[0])


def write_checkpoint(name: str, folder: Path) -> int:
    """``folder``: config.json and halfprec's bf16 model.safetensors; returns its bytes."""
    import torch

    from halfprec.io.materialize import build_on_meta
    from halfprec.io.stream import convert_file
    from halfprec.io.tensorfile import TensorWriter

    config = _config(name)
    cls = _model_class(config)
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    model = build_on_meta(lambda: cls(config))
    seen: set[int] = set()  # tied parameters are written once, as save_pretrained does
    specs = {}
    for key, t in model.state_dict(keep_vars=True).items():
        if t.is_meta and t.is_floating_point() and id(t) not in seen:
            seen.add(id(t))
            specs[key] = (torch.float32, tuple(t.shape))
    fp32 = folder / "fp32.safetensors"
    gen = torch.Generator().manual_seed(0)
    with fp32.open("wb") as f:
        writer = TensorWriter(f, specs)
        for key, (_, shape) in specs.items():
            writer.write(key, torch.randn(shape, generator=gen) * 0.02)
        writer.close()
    dst = folder / "model.safetensors"
    convert_file(fp32, dst, lambda: cls(config), "bf16")
    fp32.unlink()
    return dst.stat().st_size


def _touch(model: Any) -> None:
    """Read every byte of every parameter and buffer."""
    import torch

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            if t.numel():
                t.detach().reshape(-1).view(torch.uint8).max()


def _load(how: str, folder: Path, cls: Any, config: Any) -> Any:
    import torch

    import halfprec

    if how == "halfprec":
        return halfprec.load(folder / "model.safetensors", into=lambda: cls(config))
    return cls.from_pretrained(folder, dtype=torch.bfloat16)


def child(how: str, folder: str, name: str, tiny: str) -> None:
    import ctypes

    config, small = _config(name), _config("tiny")
    cls = _model_class(config)  # transformers imports the model's module on first use
    _load(how, Path(tiny), _model_class(small), small)  # lazy imports, outside the measurement
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    from halfprec.timing import now  # imported before the measurement

    start = now()
    model = _load(how, Path(folder), cls, config)
    loaded = now() - start
    _touch(model)
    touched = now() - start
    print(json.dumps({"peak": _status("VmHWM") - before, "load_s": loaded, "touch_s": touched}))


def _run(*args: str) -> dict[str, float]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, __file__, "child", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode:
        raise SystemExit(f"child {args}: {proc.stderr.strip().splitlines()[-3:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _summary(values: list[float], unit: float, fmt: str) -> str:
    med = statistics.median(values) / unit
    return f"{med:{fmt}} ({min(values) / unit:{fmt}}-{max(values) / unit:{fmt}})"


def bench(name: str, runs: int, tmp: Path) -> None:
    folder, tiny = tmp / name, tmp / "tiny"
    size = write_checkpoint(name, folder)
    if not (tiny / "model.safetensors").is_file():
        write_checkpoint("tiny", tiny)
    results: dict[str, list[dict[str, float]]] = {"halfprec": [], "from_pretrained": []}
    for _ in range(runs):  # alternately, so that load on the machine hits both alike
        for how in results:
            results[how].append(_run(how, str(folder), name, str(tiny)))
    print(f"{name}: bf16 file {size / MB:.0f} MiB, {runs} fresh processes each")
    for how, rows in results.items():
        peak = _summary([r["peak"] for r in rows], MB, ".0f")
        load = _summary([r["load_s"] for r in rows], 1, ".2f")
        touch = _summary([r["touch_s"] for r in rows], 1, ".2f")
        print(f"  {how:16s} peak +{peak} MiB, load {load} s, load + read {touch} s")
    ratio = {
        key: statistics.median(r[key] for r in results["halfprec"])
        / statistics.median(r[key] for r in results["from_pretrained"])
        for key in ("peak", "load_s", "touch_s")
    }
    print(
        f"  halfprec / from_pretrained: peak {ratio['peak']:.2f}x, load {ratio['load_s']:.2f}x, "
        f"load + read {ratio['touch_s']:.2f}x"
    )


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        return child(*sys.argv[2:6])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["bert"], help="bert, llama")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for name in args.models:
            bench(name, args.runs, Path(d))
    return None


if __name__ == "__main__":
    main()
