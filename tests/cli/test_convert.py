"""``halfprec convert --weights``: a safetensors file streamed into a half checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from support import SUPPORT
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
