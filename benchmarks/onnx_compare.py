"""ONNX fp16 on onnxruntime CPU: halfprec's export vs onnxconverter-common, against fp32.

Three ONNX files of the same model, run by onnxruntime's CPU provider on the same batches:

- fp32: the fp32 model exported by torch.onnx (the baseline);
- halfprec fp16: ``halfprec.export(..., format="onnx")``: fp16 weights, fp32 norm islands,
  fp32 inputs and outputs;
- onnxconverter-common fp16: ``convert_float_to_float16(fp32, keep_io_types=True)``.

Accuracy is against PyTorch fp32 (cosine, SQNR, max abs error per output, all example
batches); latency is onnxruntime's median over ``--runs`` calls on the first batch, the
three files timed one after another in this process. Also printed: file size, Cast
nodes in each file, and the Cast nodes onnxruntime inserts to run fp16 nodes it has no
CPU kernel for in fp32.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python benchmarks/onnx_compare.py --model builtin:minilm
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import halfprec
from halfprec.compare import compare_outputs, run_reference
from halfprec.dtypes import device_support
from halfprec.errors import HalfprecError
from halfprec.export import load_artifact
from halfprec.export.api import fp32_info, write_artifact
from halfprec.export.capture import forward_params, named_inputs
from halfprec.export.config import ExportConfig
from halfprec.export.info import ArtifactInfo
from halfprec.export.onnx import OnnxSession, import_onnxruntime, inspect_casts
from halfprec.io.specs import load_model
from halfprec.timing import measure
from halfprec.tree import flatten


@dataclass
class Row:
    name: str
    path: Path
    error: str
    cosine: dict[str, float]
    sqnr_db: dict[str, float]
    max_abs: dict[str, float]
    bytes: int
    median_ms: float
    spread: float
    casts_in_file: int
    casts_inserted: int
    fallback: dict[str, int]


def _fp32_onnx(model: torch.nn.Module, batches: list[Any], path: Path, info: ArtifactInfo) -> None:
    params = forward_params(model)
    named = [named_inputs(b, params) for b in batches]
    write_artifact(ExportConfig(format="onnx"), model, named, path, fp32_info(info))


def _onnxconverter(fp32_path: Path, path: Path) -> None:
    import onnx
    from onnxconverter_common import float16

    # As documented, no workarounds: on graphs with Cast(to=float) nodes (HF attention
    # masks) onnxconverter-common 1.16 marks the Cast output fp16 but keeps to=float, and
    # onnxruntime rejects the file (microsoft/onnxconverter-common#320, fix in PR #328).
    model = onnx.load(str(fp32_path))
    onnx.save(float16.convert_float_to_float16(model, keep_io_types=True), str(path))


def _row(name: str, path: Path, batches: list[Any], refs: list[Any], runs: int) -> Row:
    try:
        return _measure(name, path, batches, refs, runs)
    except HalfprecError as exc:
        size = path.stat().st_size if path.exists() else 0
        return Row(name, path, " ".join(str(exc).split())[:300], {}, {}, {}, size, 0, 0, 0, 0, {})


def _measure(name: str, path: Path, batches: list[Any], refs: list[Any], runs: int) -> Row:
    artifact = load_artifact(path)
    outputs = [artifact(b) for b in batches]
    cmp = compare_outputs(refs, outputs, dtype=torch.float16)
    session = OnnxSession(path)
    feeds = session.feeds(flatten(artifact.prepare(batches[0])))
    timing = measure(lambda: session.session.run(None, feeds), runs=runs, warmup=3)
    casts = inspect_casts(path)
    return Row(
        name=name,
        path=path,
        error="",
        cosine={o.path: o.cosine for o in cmp.outputs},
        sqnr_db={o.path: o.sqnr_db for o in cmp.outputs},
        max_abs={o.path: o.max_abs for o in cmp.outputs},
        bytes=path.stat().st_size,
        median_ms=timing.median * 1e3,
        spread=timing.spread,
        casts_in_file=casts.casts_in_file,
        casts_inserted=casts.casts_inserted,
        fallback=casts.fp32_fallback_ops,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:minilm")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out-dir", type=Path, default=None, help="keep the .onnx files here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ort = import_onnxruntime()

    loaded = load_model(args.model)
    batches = loaded.example_inputs
    refs = run_reference(loaded.model, batches)
    with tempfile.TemporaryDirectory(prefix="halfprec-bench-") as tmp:
        folder = args.out_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        ours = halfprec.export(
            loaded.model, batches, folder / "halfprec_fp16.onnx", name=loaded.name
        )
        _fp32_onnx(loaded.model, batches, folder / "fp32.onnx", ours.info)
        _onnxconverter(folder / "fp32.onnx", folder / "onnxconverter_fp16.onnx")
        rows = [
            _row(name, folder / file, batches, refs, args.runs)
            for name, file in (
                ("fp32 (torch.onnx)", "fp32.onnx"),
                ("halfprec fp16", "halfprec_fp16.onnx"),
                ("onnxconverter-common fp16", "onnxconverter_fp16.onnx"),
            )
        ]
    cpu = device_support("cpu")
    base = rows[0].median_ms
    if args.json:
        print(json.dumps([{**r.__dict__, "path": str(r.path)} for r in rows], indent=2))
        return
    print(f"model {loaded.name}; {len(batches)} batches; onnxruntime {ort.__version__} CPU")
    print(f"cpu: {cpu.name} ({', '.join(cpu.features) or 'no half features'})")
    first = rows[0].cosine
    out_names = list(first)
    head = "| variant | size | " + " | ".join(f"cosine {o}" for o in out_names)
    print(head + " | min SQNR dB | ORT median ms | vs fp32 | Casts in file | Casts ORT adds |")
    print("|" + "---|" * (len(out_names) + 7))
    for r in rows:
        if r.error:
            print(f"| {r.name} | {r.bytes / 2**20:.1f} MiB | onnxruntime: {r.error} |")
            continue
        cos = " | ".join(f"{r.cosine[o]:.6f}" for o in out_names)
        print(
            f"| {r.name} | {r.bytes / 2**20:.1f} MiB | {cos} | {min(r.sqnr_db.values()):.1f} | "
            f"{r.median_ms:.2f} (spread {r.spread:.2f}) | {base / r.median_ms:.2f}x | "
            f"{r.casts_in_file} | {r.casts_inserted} |"
        )
    for r in rows[1:]:
        if r.error:
            continue
        fallback = ", ".join(f"{op} x{n}" for op, n in r.fallback.items()) or "none"
        print(f"{r.name}: nodes onnxruntime runs in fp32 behind inserted casts: {fallback}")


if __name__ == "__main__":
    main()
