"""``export --kv-cache`` across the causal LMs and encoder-decoders of the breadth set.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/kv_cache.py \
        [--only gpt2,llama] [--formats pt2,onnx] [--steps 8] [--markdown out.md]

For each decoder-only architecture of :mod:`testbed.breadth_models` (tiny
configs, seeded random weights): export to fp16 with ``kv_cache=True`` (checked against
fp32 on a split prompt, a one-token step and an empty past), reload the file, greedy-decode
``--steps`` tokens of a left-padded two-prompt batch through it, feeding its cache back,
and compare each step's logits with fp32 run on the whole sequence without a cache.
Encoder-decoders (T5, BART, ..., Whisper) write two files: the encoder file runs once on
the example batch, the decoder file decodes from ``decoder_start_token_id``.
An export halfprec refuses (exit 2 in the CLI) is listed with its one-line reason.
Exits 1 unless every architecture exports, passes its check and decodes like fp32.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from halfprec.errors import HalfprecError
from halfprec.export import export, load_artifact
from halfprec.timing import now

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed.breadth_models import ARCHS, build, example_batch  # noqa: E402
from testbed.decode import (  # noqa: E402
    DecodeCheck,
    decode_against_fp32,
    decode_seq2seq_against_fp32,
    left_padded_prompts,
)

ENCODER_DECODER_INPUTS = ("seq2seq", "mel")


@dataclass
class Row:
    arch: str
    fmt: str
    outcome: str  # "ok", "export failed: ...", "check failed: ...", "decode wrong: ..."
    worst: float | None = None
    seconds: float = 0.0


def _one(name: str, fmt: str, steps: int, folder: Path) -> Row:
    arch = next(a for a in ARCHS if a.name == name)
    model = build(arch)
    seq2seq = arch.inputs in ENCODER_DECODER_INPUTS
    batch = example_batch(arch)
    if not seq2seq:
        batch = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask")}
    start = now()
    try:
        result = export(model, batch, folder / f"{name}.{fmt}", "fp16", kv_cache=True)
    except HalfprecError as exc:
        return Row(name, fmt, f"export failed: {exc}", None, now() - start)
    if not result.passed:
        failed = next(r for r in (result, *result.companions) if not r.passed)
        problem = (failed.comparison.problems or [failed.comparison.reason])[0]
        return Row(name, fmt, f"check failed: {problem}", None, now() - start)
    check: DecodeCheck
    if seq2seq:
        (encoder,) = result.companions
        inputs = {k: v for k, v in batch.items() if k != "decoder_input_ids"}
        step = load_artifact(result.path)
        check = decode_seq2seq_against_fp32(load_artifact(encoder.path), step, model, inputs, steps)
    else:
        prompt, mask = left_padded_prompts(model.config.vocab_size)
        check = decode_against_fp32(load_artifact(result.path), model, prompt, mask, steps)
    seconds = now() - start
    if not check.passed:
        why = "non-finite logits" if check.nonfinite else f"argmax differs at {check.disagreements}"
        return Row(name, fmt, f"decode wrong: {why}", check.worst, seconds)
    return Row(name, fmt, "ok", check.worst, seconds)


def _markdown(rows: list[Row], steps: int) -> str:
    lines = [
        f"| architecture | format | result | largest logit difference over {steps} steps | s |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        worst = "-" if r.worst is None else f"{r.worst:.2g}"
        lines.append(f"| {r.arch} | {r.fmt} | {r.outcome} | {worst} | {r.seconds:.1f} |")
    ok = sum(r.outcome == "ok" for r in rows)
    lines.append(f"\n{ok}/{len(rows)} decode like fp32 through the exported files.")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated architecture names")
    parser.add_argument("--formats", default="pt2,onnx")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--markdown", default="", help="write the table here too")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    names = (
        args.only.split(",")
        if args.only
        else [a.name for a in ARCHS if a.kind == "causal" or a.inputs in ENCODER_DECODER_INPUTS]
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="halfprec-kv-") as tmp:
        for name in names:
            for fmt in args.formats.split(","):
                rows.append(_one(name, fmt, args.steps, Path(tmp)))
                print(f"{name} {fmt}: {rows[-1].outcome[:160]}", file=sys.stderr, flush=True)
    table = _markdown(rows, args.steps)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0 if all(r.outcome == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
