"""Lint every modeling file of the installed transformers, and check what the lint says.

    PYTHONPATH=src python benchmarks/lint_transformers.py [--runs 3] [--seed 0] [--identity]

1. Speed: files/min, median of ``--runs`` runs after a warm-up.
2. Tensor creations without dtype inside forward paths: counted by the lint (HP101) and by
   a plain AST count (every ``torch.<factory>(...)`` call without ``dtype=`` in a function
   on a forward path), as a cross-check: every finding must be one of the plain count's.
3. Precision and recall from a hand-checked sample: ``--seed`` draws 50 findings and 50 of
   the plain count's calls that the lint leaves alone; benchmarks/data/lint_sample.json
   holds them with a verdict per item (``leak`` or ``no leak``, and why). A *leak*: in a
   half model the new tensor is fp32 where it meets the model's half tensors (an upcast,
   a dtype error, or half values copied into an fp32 output) with no cast in between;
   integer or bool results, 0-dim values, masks cast where used, and tables cast to the
   model's dtype before use are not. A sample drawn
   again from the same transformers version and seed is the same one, so the verdicts are
   reused; otherwise the file is rewritten with empty verdicts to fill in by hand.
4. ``lint --fix`` (safe fixes, as the README's line runs it) applied to every file: the
   count of fixes, whether each fixed file still compiles and imports, and, for every
   architecture of the breadth benchmark (tests/testbed/breadth_models.py), and of tiny
   models of further files with fixes (``EXTRA``, ``BUILT``: each runs a fixed line),
   whether the model gives identical fp32 outputs with the fixed code (the model's
   classes swapped for the fixed file's, same weights, same batch). ``--identity`` runs
   only this step.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from halfprec.leaks.lint import LintConfig, lint_paths, lint_source
from halfprec.timing import now
from halfprec.tree import map_tensors
from lint_corpus import plain_sites  # a sibling script: its folder is on sys.path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed.breadth_models import ARCHS, build, example_batch  # noqa: E402

ROOT = Path(transformers.__file__).parent
DATA = Path(__file__).parent / "data" / "lint_sample.json"
SAMPLE = 50
Site = tuple[str, int, int]  # path relative to transformers/, line, 1-based column


def modeling_files() -> list[Path]:
    return sorted((ROOT / "models").glob("**/modeling_*.py"))


def speed(files: list[Path], runs: int) -> None:
    config = LintConfig()
    lint_paths(files[:50], config)  # warm-up: imports, regex compilation, file cache
    times = []
    for _ in range(runs):
        start = now()
        lint_paths(files, config)
        times.append(now() - start)
    median = statistics.median(times)
    print(
        f"lint: median {median:.2f} s over {runs} runs -> {len(files) / median * 60:.0f} "
        f"files/min (runs: {', '.join(f'{t:.2f}' for t in times)})"
    )


def plain_count(path: Path) -> set[Site]:
    """Every ``torch.<factory>(...)`` without ``dtype=`` (or ``**kwargs``) in a function on
    a forward path of ``path``: the lint's scope, none of its judgement."""
    return plain_sites(ROOT, path)


def counts(files: list[Path]) -> tuple[set[Site], set[Site]]:
    report = lint_paths(files, LintConfig())
    found = {
        (str(Path(f.path).relative_to(ROOT)), f.line, f.col)
        for f in report.findings
        if f.code == "HP101"
    }
    plain: set[Site] = set()
    for path in files:
        plain |= plain_count(path)
    with_findings = sum(bool(r.findings) for r in report.files)
    print(f"findings by rule: {report.counts()} in {with_findings} files")
    print(
        f"tensor creations without dtype in forward paths: {len(plain)} (plain AST count); "
        f"HP101 findings: {len(found)}; findings outside the plain count: {len(found - plain)}"
    )
    return found, plain


def _line(site: Site) -> str:
    return (ROOT / site[0]).read_text().splitlines()[site[1] - 1].strip()


def sample(found: set[Site], plain: set[Site], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    picked = {
        "finding": rng.sample(sorted(found), min(SAMPLE, len(found))),
        "non-finding": rng.sample(sorted(plain - found), min(SAMPLE, len(plain - found))),
    }
    old = json.loads(DATA.read_text()) if DATA.exists() else {}
    verdicts = {}
    if old.get("transformers") == transformers.__version__ and old.get("seed") == seed:
        verdicts = {(i["path"], i["line"], i["col"]): i for i in old["items"]}
    items = []
    for kind, sites in picked.items():
        for site in sites:
            was = verdicts.get(site, {})
            items.append(
                {
                    "kind": kind,
                    "path": site[0],
                    "line": site[1],
                    "col": site[2],
                    "code": _line(site),
                    "verdict": was.get("verdict"),
                    "why": was.get("why", ""),
                }
            )
    data = {"transformers": transformers.__version__, "seed": seed, "items": items}
    if data != old:
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {DATA}")
    return data


def precision_recall(data: dict[str, Any], found: int, unflagged: int) -> None:
    items = data["items"]
    if any(i["verdict"] not in ("leak", "no leak") for i in items):
        print(f"precision/recall: hand-check the verdicts in {DATA} first")
        return
    flagged = [i for i in items if i["kind"] == "finding"]
    left = [i for i in items if i["kind"] == "non-finding"]
    true_pos = sum(i["verdict"] == "leak" for i in flagged)
    missed = sum(i["verdict"] == "leak" for i in left)
    precision = true_pos / len(flagged)
    est_true = precision * found
    est_missed = missed / len(left) * unflagged
    recall = est_true / (est_true + est_missed) if est_true + est_missed else 1.0
    # with no miss in the sample, the rule of three bounds the miss rate at 3/n (95%)
    worst = max(missed, 3) / len(left) * unflagged
    print(
        f"precision: {true_pos}/{len(flagged)} sampled findings are leaks = {precision:.0%}; "
        f"{missed}/{len(left)} sampled non-findings are leaks -> recall ~ {recall:.0%} "
        f"(~{est_true:.0f} leaks found, ~{est_missed:.0f} missed of {unflagged} unflagged; "
        f"95% bound: at most ~{worst:.0f} missed, recall >= {est_true / (est_true + worst):.0%})"
    )


def _fixed_module(name: str, source: str) -> types.ModuleType:
    """The module ``name`` made again from ``source`` (relative imports resolved as the
    original's), without replacing the original in ``sys.modules``."""
    original = importlib.import_module(name)
    module = types.ModuleType(name)
    module.__file__ = original.__file__
    module.__package__ = original.__package__
    module.__spec__ = original.__spec__
    exec(compile(source, str(original.__file__), "exec"), module.__dict__)
    return module


def fix_all(files: list[Path]) -> dict[str, str]:
    """Safe fixes on every file: count them, compile and import each fixed file."""
    fixed: dict[str, str] = {}
    fixes = failed = 0
    for path in files:
        result = lint_paths([path], LintConfig(), fix=True).files[0]
        if result.new_source is None:
            continue
        fixes += result.fixed
        name = "transformers." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
        try:
            compile(result.new_source, str(path), "exec")
            _fixed_module(name, result.new_source)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
            failed += 1
            print(f"  {name}: fixed file fails: {type(exc).__name__}: {exc}")
            continue
        fixed[name] = result.new_source
    print(
        f"lint --fix (safe): {fixes} fixes in {len(fixed) + failed} files; "
        f"{len(fixed)} import, {failed} fail"
    )
    return fixed


def _swap(model: torch.nn.Module, fixed: types.ModuleType) -> int:
    swapped = 0
    for m in model.modules():
        cls = type(m)
        if cls.__module__ == fixed.__name__ and hasattr(fixed, cls.__name__):
            m.__class__ = getattr(fixed, cls.__name__)
            swapped += 1
    return swapped


def _outputs(model: torch.nn.Module, batch: dict[str, Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        torch.manual_seed(0)
        out = model(**batch)
    found: list[torch.Tensor] = []
    map_tensors(lambda t: found.append(t) or t, out.to_tuple() if hasattr(out, "to_tuple") else out)
    return found


_SMALL = {
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}
# tiny models of three modeling files with safe fixes, beyond the breadth benchmark's
EXTRA: dict[str, tuple[str, str, dict[str, Any]]] = {
    "yoso": ("YosoModel", "YosoConfig", _SMALL),
    "mra": ("MraModel", "MraConfig", _SMALL),
    "longt5-tglobal": (
        "LongT5Model",
        "LongT5Config",
        {
            "vocab_size": 128,
            "d_model": 32,
            "d_kv": 16,
            "d_ff": 64,
            "num_layers": 1,
            "num_heads": 2,
            "encoder_attention_type": "transient-global",
        },
    ),
}


Built = tuple[torch.nn.Module, dict[str, Any]]


def _seeded() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _nystromformer() -> Built:
    """Landmarks fewer than the tokens: the attention's iterative inverse (its ``eye``) runs."""
    cfg = transformers.NystromformerConfig(
        **_SMALL, num_landmarks=4, conv_kernel_size=3, segment_means_seq_len=16
    )
    ids = torch.randint(3, 128, (2, 16), generator=_seeded())
    return transformers.NystromformerModel(cfg), {"input_ids": ids}


def _tvp() -> Built:
    """The default frame-pad prompter (``replace``): its zero ``base`` runs."""
    backbone = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"]
    )
    cfg = transformers.TvpConfig(
        backbone_config=backbone,
        **_SMALL,
        max_grid_row_position_embeddings=8,
        max_grid_col_position_embeddings=8,
        num_frames=2,
        visual_prompt_size=4,
        max_img_size=32,
    )
    batch = {
        "input_ids": torch.randint(3, 128, (1, 8), generator=_seeded()),
        "pixel_values": torch.randn(1, 2, 3, 32, 32, generator=_seeded()),
    }
    return transformers.TvpModel(cfg), batch


def _sam(hq: bool = False) -> Built:
    """Points without boxes: the prompt encoder pads them (its zero ``padding_point``)."""
    config = transformers.SamHQConfig if hq else transformers.SamConfig
    cfg = config(
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "mlp_dim": 64,
            "image_size": 64,
            "patch_size": 16,
            "output_channels": 16,
            "window_size": 2,
            "global_attn_indexes": [0],
            "num_pos_feats": 8,
        },
        prompt_encoder_config={
            "hidden_size": 16,
            "image_size": 64,
            "patch_size": 16,
            "mask_input_channels": 4,
        },
        mask_decoder_config={
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "mlp_dim": 32,
            "iou_head_hidden_dim": 16,
            **({"vit_dim": 32} if hq else {}),
        },
    )
    batch = {
        "pixel_values": torch.randn(1, 3, 64, 64, generator=_seeded()),
        "input_points": torch.rand(1, 1, 2, 2, generator=_seeded()) * 64,
    }
    return (transformers.SamHQModel if hq else transformers.SamModel)(cfg), batch


def _videoprism() -> Built:
    """A video-text model asked for its loss: the sigmoid loss's ``eye`` runs."""
    cfg = transformers.VideoPrismConfig(
        vision_config={
            "image_size": 16,
            "num_frames": 2,
            "tubelet_size": [1, 8, 8],
            "hidden_size": 32,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "num_spatial_layers": 1,
            "num_temporal_layers": 1,
            "num_auxiliary_layers": 1,
        },
        text_config={**_SMALL, "max_position_embeddings": 16},
    )
    batch = {
        "pixel_values_videos": torch.randn(2, 2, 3, 16, 16, generator=_seeded()),
        "input_ids": torch.randint(3, 128, (2, 8), generator=_seeded()),
        "return_loss": True,
    }
    return transformers.VideoPrismClipModel(cfg), batch


def _chmv2(bins: str) -> Built:
    """A depth head with ``linear`` or ``log`` bins: its ``linspace`` of bins runs."""
    backbone = {
        "model_type": "dinov3_vit",
        "image_size": 32,
        "patch_size": 8,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_hidden_layers": 4,
        "num_register_tokens": 1,
        "out_indices": [1, 2, 3, 4],
        "reshape_hidden_states": True,
        "return_class_token": True,
    }
    cfg = transformers.CHMv2Config(
        backbone_config=backbone,
        patch_size=8,
        post_process_channels=[8, 8, 8, 8],
        fusion_hidden_size=8,
        head_hidden_size=8,
        number_output_channels=4,
        bins_strategy=bins,
        norm_strategy="linear",
    )
    batch = {"pixel_values": torch.randn(1, 3, 32, 32, generator=_seeded())}
    return transformers.CHMv2ForDepthEstimation(cfg), batch


def _pe_audio() -> Built:
    """An audio-text model asked for its loss: the loss's ``eye`` of labels runs."""
    audio = {
        "dac_config": {
            "downsampling_ratios": [2, 2],
            "encoder_hidden_size": 8,
            "codebook_dim": 8,
            "hidden_size": 16,
        },
        **_SMALL,
        "num_key_value_heads": 2,
        "head_dim": 16,
    }
    text = {**_SMALL, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    text.update(cls_token_id=1, sep_token_id=2)
    cfg = transformers.PeAudioConfig(text_config=text, audio_config=audio)
    batch = {
        "input_ids": torch.randint(3, 128, (2, 8), generator=_seeded()),
        "input_values": torch.randn(2, 1, 64, generator=_seeded()),
        "return_loss": True,
    }
    model = transformers.PeAudioModel(cfg)
    with torch.no_grad():  # a trained scale; at its initial 0 every logit, so the loss, is 0
        model.text_audio_logit_scale.fill_(10.0)
    return model, batch


# tiny models whose batch is not token ids alone, each running a line --fix rewrites
BUILT: dict[str, Callable[[], Built]] = {
    "nystromformer": _nystromformer,
    "tvp": _tvp,
    "sam": _sam,
    "sam-hq": lambda: _sam(hq=True),
    "videoprism": _videoprism,
    "chmv2-linear": lambda: _chmv2("linear"),
    "chmv2-log": lambda: _chmv2("log"),
    "pe-audio": _pe_audio,
}


def _models() -> list[tuple[str, torch.nn.Module, dict[str, Any]]]:
    out = [(a.name, build(a), example_batch(a)) for a in ARCHS]
    for name, (cls, cfg, kw) in EXTRA.items():
        torch.manual_seed(0)
        model = getattr(transformers, cls)(getattr(transformers, cfg)(**kw)).eval()
        ids = torch.randint(3, 128, (2, 12), generator=_seeded())
        batch = {"input_ids": ids}
        if "T5" in cls:
            batch["decoder_input_ids"] = ids[:, :6]
        out.append((name, model, batch))
    for name, make in BUILT.items():
        torch.manual_seed(0)
        model, batch = make()
        out.append((name, model.eval(), batch))
    return out


def identity(fixed: dict[str, str]) -> None:
    """fp32 outputs of each tiny architecture with its modeling file as --fix leaves it."""
    same = differ = with_fixes = 0
    models = _models()
    for arch, model, batch in models:
        name = type(model).__module__
        before = _outputs(model, batch)
        swapped = 0
        if name in fixed:
            with_fixes += 1
            swapped = _swap(model, _fixed_module(name, fixed[name]))
        after = _outputs(model, batch)
        equal = len(before) == len(after) and all(
            x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(before, after, strict=True)
        )
        same += equal
        differ += not equal
        if name in fixed or not equal:
            print(
                f"  {arch:16} {name.rsplit('.', 1)[1]:28} {swapped:3} modules swapped  "
                f"{'identical' if equal else 'DIFFERENT'}"
            )
    print(
        f"fp32 identity after --fix: {same} of {len(models)} tiny architectures identical, "
        f"{differ} different; {with_fixes} of them had fixes in their modeling file (the "
        "others' files need none)"
    )


def libcst_ratio(files: list[Path], rounds: int = 3) -> None:
    """How much slower libcst's parse plus its ScopeProvider (the analysis it would offer)
    is than ``ast.parse`` plus the whole lint, interleaved on the same files."""
    import libcst
    from libcst.metadata import MetadataWrapper, ScopeProvider

    sources = [p.read_text() for p in files]
    ours, theirs = [], []
    for _ in range(rounds):
        start = now()
        for text in sources:
            lint_source(text)
        ours.append(now() - start)
        start = now()
        for text in sources:
            MetadataWrapper(libcst.parse_module(text)).resolve(ScopeProvider)
        theirs.append(now() - start)
    ratio = statistics.median(theirs) / statistics.median(ours)
    print(
        f"libcst parse + ScopeProvider on {len(files)} files: {ratio:.1f}x the time of the "
        f"whole ast-based lint (medians of {rounds} interleaved rounds)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--libcst", type=int, default=0, help="compare libcst on N files")
    parser.add_argument(
        "--identity", action="store_true", help="only --fix and the fp32 identity check"
    )
    opts = parser.parse_args()
    files = modeling_files()
    if opts.identity:
        identity(fix_all(files))
        return
    print(
        f"transformers {transformers.__version__}: {len(files)} modeling files; "
        f"python {sys.version.split()[0]}, torch {torch.__version__}"
    )
    speed(files, opts.runs)
    if opts.libcst:
        libcst_ratio(files[:: max(len(files) // opts.libcst, 1)][: opts.libcst])
    found, plain = counts(files)
    data = sample(found, plain, opts.seed)
    precision_recall(data, len(found), len(plain - found))
    identity(fix_all(files))


if __name__ == "__main__":
    main()
