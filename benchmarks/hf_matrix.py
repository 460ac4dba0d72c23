"""What a Hugging Face user gets from halfprec, cell by cell, on tiny configs of 24 architectures.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/hf_matrix.py \
        [--only llama,mixtral] [--cells check-fp16,check-bf16,generate,pt2,onnx] [--markdown out.md]

Each architecture is built from a tiny config (1-2 layers, width 32, vocab 128, context
128; sliding windows of 16 where the architecture has them, shorter than the 32-token
examples), saved with ``save_pretrained`` and loaded back as a directory, as a user's
checkpoint is (``halfprec.io.specs.load_model``: fp32, example batches). The cells:

- ``check-fp16`` / ``check-bf16``: ``halfprec check DIR --dtype ...`` (no timing);
- ``generate``: ``check --generate 8`` in fp16: greedy tokens agree with fp32;
- ``pt2`` / ``onnx``: ``export --kv-cache`` in fp16, its check, then greedy decoding through
  the file to twice the example length (64 positions; encoder-decoders: 16 decoder tokens),
  each step against fp32 without a cache; models that do not decode (vision, audio,
  multimodal, time series): ``export`` without a cache and its check;
- ``outdir``: ``convert DIR -o OUTDIR`` in bf16 (``halfprec.io.hf_convert.convert_directory``:
  plain transformers' ``from_pretrained`` of OUTDIR against fp32), and
  ``halfprec.load(OUTDIR)`` giving back the converted model tensor for tensor;
- ``islands``: how close plain ``from_pretrained(OUTDIR)`` (bf16) comes to halfprec's own
  converted model (largest output difference), and the same with the norm islands' weights
  kept fp32 by transformers' own ``_keep_in_fp32_modules_strict`` (a class attribute, set
  for the load and restored): the route a config field would take, were there one.

The example inputs are the ones ``halfprec check DIR`` builds (:mod:`halfprec.io.hf_inputs`).
A cell is ``ok``, ``refused`` (exit 2, one line naming the missing feature, and nothing
written: a refusal that left a file is a failure), or one line with the reason. Exits 1
unless every cell run is ``ok`` or such a refusal.
It is a benchmark, not a test: export cells take 5-30 s each on a laptop CPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from halfprec.check import check
from halfprec.errors import HalfprecError, clip
from halfprec.export import export, load_artifact
from halfprec.io.specs import LoadedModel, load_model
from halfprec.modules import first_line
from halfprec.timing import now

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed import hf_processors, hf_tiny  # noqa: E402
from testbed.decode import (  # noqa: E402
    decode_against_fp32,
    decode_seq2seq_against_fp32,
    left_padded_prompts,
)

CELLS = ("check-fp16", "check-bf16", "generate", "pt2", "onnx", "outdir", "islands")
CONTEXT = 128
EXAMPLE = 32  # tokens in the example batches load_model makes without a tokenizer


def _check(loaded: LoadedModel, dtype: str, generate: int = 0) -> str:
    result = check(loaded.model, loaded.example_inputs, dtype, runs=0, generate=generate)
    if not result.passed:
        return f"FAIL: {result.comparison.reason}"
    gen = result.generation
    if generate and gen is not None:
        return f"ok (token agreement {gen.agreement:.0%})"
    return "ok"


def _decodes(model: Any) -> bool:
    """A text model that generates (a causal LM or a seq2seq model): exported with its cache
    and decoded; an encoder-decoder that does not generate (DETR) and an image-to-text
    model (BLIP, LLaVA: ``--kv-cache`` covers text decoders) are exported without one."""
    return bool(model.can_generate()) and not hasattr(model.config, "vision_config")


def _export(loaded: LoadedModel, fmt: str, folder: Path) -> str:
    model = loaded.model
    seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    cached = _decodes(model)
    result = export(model, loaded.example_inputs, folder / f"m.{fmt}", "fp16", kv_cache=cached)
    if not result.passed:
        failed = next(r for r in (result, *result.companions) if not r.passed)
        return f"check FAIL: {(failed.comparison.problems or [failed.comparison.reason])[0]}"
    if not cached:
        fixed = [n.split(":")[0] for n in result.notes if " is fixed at " in n]
        return f"ok (no cache; {'; '.join([result.comparison.reason.split(',')[0], *fixed])})"
    if seq2seq:
        (encoder,) = result.companions
        inputs = {k: v for k, v in loaded.example_inputs[0].items() if k != "decoder_input_ids"}
        steps = 2 * loaded.example_inputs[0]["decoder_input_ids"].shape[1]
        limit = getattr(model.config, "max_target_positions", None)  # Whisper's 32
        steps = min(steps, int(limit) - 1) if limit else steps
        run, enc = load_artifact(result.path), load_artifact(encoder.path)
        decoded = decode_seq2seq_against_fp32(enc, run, model, inputs, steps)
    else:
        prompt, mask = left_padded_prompts(model.config.vocab_size)
        steps = 2 * EXAMPLE - prompt.shape[1]
        decoded = decode_against_fp32(load_artifact(result.path), model, prompt, mask, steps)
    if not decoded.passed:
        why = (
            "non-finite logits" if decoded.nonfinite else f"argmax differs: {decoded.disagreements}"
        )
        why = clip(why, 120)
        return f"decode FAIL after {len(decoded.tokens[0])} tokens: {why}"
    return f"ok ({len(decoded.tokens[0])} tokens, logit diff <= {decoded.worst:.2g})"


def _outdir(loaded: LoadedModel, source: Path, folder: Path, build: Any) -> str:
    from halfprec import Recipe, convert, load, recipe_of
    from halfprec.io.hf_convert import convert_directory
    from halfprec.io.hf_dir import RECIPE_FILE

    out = folder / "outdir"
    done = convert_directory(source, out, Recipe(dtype="bf16"), device="cpu")
    half = convert(loaded.model, Recipe.load(out / RECIPE_FILE))
    back = load(out, into=build)
    same = recipe_of(back) == Recipe.load(out / RECIPE_FILE) and all(
        torch.equal(a, b)
        for a, b in zip(back.state_dict().values(), half.state_dict().values(), strict=True)
    )
    verdict, kept = done.check, done.transformers_keeps_fp32
    if verdict is None or not verdict.passed or not same:
        why = (verdict.reason if verdict else done.unchecked) if same else "halfprec.load differs"
        return clip(f"FAIL: {why}", 200)
    return f"ok (transformers keeps {sum(kept.values())}/{len(kept)} islands fp32)"


def _islands(loaded: LoadedModel, source: Path, folder: Path) -> str:
    from halfprec import Recipe, convert
    from halfprec.io.hf_dir import RECIPE_FILE, InputsInDtype, save_pretrained_dir
    from halfprec.tree import flatten

    half = convert(loaded.model, Recipe(dtype="bf16"))
    save_pretrained_dir(half, folder / "o", source=source)
    batch = loaded.example_inputs[0]
    cls: Any = type(loaded.model)

    def worst(model: Any) -> str:
        with torch.no_grad():
            try:
                got = flatten(InputsInDtype(model.eval())(**batch))
            except RuntimeError as exc:
                return f"crash ({first_line(exc)[:60]})"
            want = flatten(half(**batch))
        diffs = [(got[k].float() - v.float()).abs().max() for k, v in want.items() if k in got]
        return f"{max(float(d) for d in diffs):.2g}"

    plain = worst(cls.from_pretrained(str(folder / "o")))
    keep = {n.rsplit(".", 1)[-1] for n in Recipe.load(folder / "o" / RECIPE_FILE).keep_fp32}
    name = "_keep_in_fp32_modules_strict"
    own = name in cls.__dict__
    saved = cls.__dict__.get(name)
    setattr(cls, name, keep)
    try:
        kept = worst(cls.from_pretrained(str(folder / "o")))
    finally:
        if own:
            setattr(cls, name, saved)
        else:
            delattr(cls, name)
    return f"ok (plain {plain}; norms kept fp32 {kept})"


def _cell(loaded: LoadedModel, cell: str, root: Path, build: Any = None) -> str:
    folder = root / cell  # each cell its own folder: a refusal must leave it empty
    folder.mkdir()
    try:
        if cell == "check-fp16":
            return _check(loaded, "fp16")
        if cell == "check-bf16":
            return _check(loaded, "bf16")
        if cell == "generate":
            if getattr(loaded.model.config, "is_encoder_decoder", False) or not _decodes(
                loaded.model
            ):
                return "n/a (--generate is for causal LMs)"
            return _check(loaded, "fp16", generate=8)
        if cell == "islands":
            return _islands(loaded, root / "model", folder)
        if cell == "outdir":
            return _outdir(loaded, root / "model", folder, build)
        return _export(loaded, cell, folder)
    except HalfprecError as exc:
        left = sorted(p.name for p in folder.iterdir())
        if left:
            return clip(f"refused but left {', '.join(left)}: {exc}", 200)
        return clip(f"refused (nothing written): {exc}", 320)
    except Exception as exc:  # a benchmark lists upstream failures instead of stopping
        return clip(f"error: {first_line(exc)}", 200)


def _same_class(loaded: LoadedModel) -> Any:
    """A constructor of an empty model of the loaded one's class and config."""
    model = loaded.model
    return lambda: type(model)(model.config)


def main() -> int:
    import transformers as tf

    tf.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated architecture names")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    builders = hf_tiny.builders(tf, CONTEXT)
    names = [n for n in args.only.split(",") if n] or [*builders, *hf_processors.NAMES]
    cells = [c for c in args.cells.split(",") if c]
    known = (*builders, *hf_processors.NAMES)
    unknown = [n for n in names if n not in known] + [c for c in cells if c not in CELLS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}; choose from {', '.join(known)} / {CELLS}")
    lines = ["| architecture | " + " | ".join(cells) + " | s |", "|---" * (len(cells) + 2) + "|"]
    failed = 0
    for name in names:
        start = now()
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            if name in hf_processors.NAMES:  # saved with its processor
                hf_processors.save(name, Path(tmp) / "model")
            else:
                builders[name]().save_pretrained(f"{tmp}/model")
            loaded = load_model(f"{tmp}/model")
            build = builders.get(name) or _same_class(loaded)
            row = [_cell(loaded, cell, Path(tmp), build) for cell in cells]
        failed += sum(not r.startswith(("ok", "n/a", "refused (nothing written)")) for r in row)
        line = f"| {name} | " + " | ".join(row) + f" | {now() - start:.0f} |"
        print(line, flush=True)
        lines.append(line)
    total = len(names) * len(cells)
    na = sum(line.count("| n/a") for line in lines)
    refused = sum(line.count("| refused (nothing written)") for line in lines)
    ok = total - failed - na - refused
    lines += ["", f"{ok}/{total - na} cells ok, {refused} refused with nothing written ({na} n/a)."]
    print(lines[-1])
    if args.markdown is not None:
        args.markdown.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
