"""``halfprec export``: .pt2 and ONNX exports checked from the command line, bad names exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import SUPPORT

MODELS = str(SUPPORT / "export_models.py")


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.slow
def test_cli_export_then_check_artifact(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tiny.pt2"
    proc = cli("export", f"{MODELS}:tiny", "-o", str(out), "--dtype", "fp16", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "exported-program" and data["passed"] is True
    assert data["python_max_abs"] == 0.0

    # the passing `check --artifact` path is covered by test_export_onnx.py
    strict = cli("check", f"{MODELS}:tiny", "--artifact", str(out), "--min-sqnr", "200")
    assert strict.returncode == 1
    assert "FAIL" in strict.stdout


@pytest.mark.slow
def test_cli_bad_output_name_exits_2(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = cli("export", f"{MODELS}:tiny", "-o", str(tmp_path / "tiny.bin"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "cannot tell the export format" in proc.stderr
    assert _files(tmp_path) == []


@pytest.mark.slow
def test_cli_onnx_export_and_check(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tiny.onnx"
    proc = cli("export", f"{MODELS}:tiny", "-o", str(out), "--runs", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "onnx" and data["dtype"] == "fp16" and data["passed"]
    assert data["ort_casts"]["casts_in_file"] >= 4 and data["ort_latency"] is None

    ok = cli("check", f"{MODELS}:tiny", "--artifact", str(out), "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["passed"] is True and report["info"]["format"] == "onnx"


@pytest.mark.slow
def test_cli_unsupported_op_exits_2(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = cli("export", f"{MODELS}:custom", "-o", str(tmp_path / "c.onnx"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("halfprec: error: operator halfprec_tests.wobble")
    assert list(tmp_path.iterdir()) == []
