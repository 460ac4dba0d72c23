"""``benchmarks/cpu_runtimes.py``: bad options are one line and exit 2, before any model
loads (the run itself is a benchmark, not a test)."""

from __future__ import annotations

import runpy
import sys

import pytest

from support import ROOT

SCRIPT = ROOT / "benchmarks" / "cpu_runtimes.py"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--models", "minilm-b64"], "unknown model minilm-b64; use a comma list of minilm-b1"),
        (["--runs", "1"], "--runs 1 gives no spread; use --runs 2 or more"),
        (["--color"], "unrecognized arguments: --color"),
    ],
)
def test_bad_option_is_one_line_exit_2(
    argv: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert exit_info.value.code == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.count("\n") == 1
    assert err.err.startswith("cpu_runtimes: error: ") and needle in err.err
