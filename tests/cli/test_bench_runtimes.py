"""``halfprec bench --variants`` with runtime targets: bad names are one line and exit 2; a
runtime that is not installed is a skipped row with its note, never a traceback."""

from __future__ import annotations

import json
import sys

import pytest

from support import SUPPORT
from support.cli import run_cli

TINY = f"{SUPPORT / 'export_models.py'}:tiny"


@pytest.mark.parametrize(
    ("variants", "needle"),
    [
        ("fp32,onnxruntime-bf16", "onnxruntime-bf16 is not offered: onnxruntime runs fp32"),
        ("openvino-fp32+compile", "openvino-fp32 is compiled by openvino itself; drop +compile"),
        ("openvino-int4", "unknown variant 'openvino-int4'"),
    ],
)
def test_bad_runtime_variant_is_one_line_exit_2(variants: str, needle: str) -> None:
    proc = run_cli("bench", TINY, "--variants", variants, "--no-memory", "--runs", "1")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("halfprec: error: ")
    assert needle in proc.stderr and proc.stdout == ""


def test_an_uninstalled_runtime_is_a_skipped_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # what an uninstalled package looks like
    proc = run_cli(
        "bench", TINY, "--variants", "fp32,openvino-fp32", "--no-memory", "--runs", "1", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = {r["variant"]: r for r in json.loads(proc.stdout)["results"]}
    assert rows["openvino-fp32"]["status"] == "skipped"
    assert rows["openvino-fp32"]["note"].endswith("pip install 'halfprec[openvino]'")
    assert rows["fp32"]["status"] == "ok"
