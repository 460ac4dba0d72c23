"""What the terminal shows: numbers never cut at 80 columns, ratios, units, counts, names."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from halfprec.check import check
from halfprec.report.common import human_time, print_check
from halfprec.timing import ratio_text
from support import FIXTURES, SRC, SUPPORT
from support.cli import run_cli
from support.export_models import example_inputs, tiny

COSINE = re.compile(r"\b[01]\.(\d+)\b")


def _cosines(text: str) -> list[str]:
    """Cosine cells: the column values (table) or `cosine  x` lines (stacked)."""
    found = []
    for line in text.splitlines():
        if "cosine" in line and "tolerance" not in line:
            found += re.findall(r"cosine\s+([0-9.]+)", line)
    return found


def test_check_at_80_columns_keeps_every_number_whole() -> None:
    result = check(tiny(), example_inputs(), "bf16", runs=0, name="a-model-name")
    buffer = io.StringIO()
    print_check(result, Console(file=buffer, width=80, force_terminal=True, color_system=None))
    text = buffer.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    cosines = _cosines(text)
    assert len(cosines) == 2  # one per output, stacked
    assert all(len(c.split(".")[1]) >= 4 for c in cosines)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script")
def test_check_under_a_pseudo_terminal_of_80_columns(tmp_path: Path) -> None:
    models = SUPPORT / "export_models.py"
    command = (
        f"stty cols 80 2>/dev/null; COLUMNS=80 PYTHONPATH={SRC} {sys.executable} -m halfprec "
        f"check {models}:tiny --dtype bf16 --runs 0"
    )
    proc = subprocess.run(
        ["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=600
    )
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", proc.stdout)
    assert proc.returncode == 0, text
    assert "…" not in text
    cosines = _cosines(text)
    assert cosines and all(len(c.split(".")[1]) >= 4 for c in cosines), text


def test_ratio_below_one_says_slower() -> None:
    assert ratio_text(1 / 11) == "11.0x slower"
    assert ratio_text(0.5) == "2x slower"
    assert ratio_text(2.1) == "2.10x faster"
    assert "0.09" not in ratio_text(0.09)


def test_times_in_human_units() -> None:
    assert human_time(4.33) == "4.33 s"
    assert human_time(0.0125) == "12.5 ms"
    assert human_time(8.3e-4) == "830 us"
    assert "e+" not in human_time(4330.0)


def test_lint_diff_counts_the_fixable_finding(tmp_path: Path) -> None:
    target = tmp_path / "helpers.py"
    target.write_text((FIXTURES / "lint" / "helpers.py").read_text())
    proc = run_cli("lint", str(target), "--diff", "--unsafe-fixes")
    assert proc.returncode == 1
    summary = proc.stderr.strip().splitlines()[-1]
    found, fixable = re.match(r"(\d+) findings? in .*?: (\d+) fixable", summary).groups()  # type: ignore[union-attr]
    assert int(found) >= int(fixable) >= 1


def test_missing_factory_names_the_file_not_an_internal_module(tmp_path: Path) -> None:
    models = SUPPORT / "export_models.py"
    proc = run_cli("check", f"{models}:nope")
    assert proc.returncode == 2
    assert "_halfprec_user_" not in proc.stderr
    assert "export_models.py" in proc.stderr


def test_tune_pass_counts_agree_with_the_table() -> None:
    from halfprec.report.tune import print_tune
    from halfprec.tune import tune

    result = tune(tiny(), example_inputs(), "bf16")
    buffer = io.StringIO()
    print_tune(result.report, Console(file=buffer, width=120, color_system=None))
    text = buffer.getvalue()
    total, in_variants, rest = map(
        int,
        re.search(  # type: ignore[union-attr]
            r"(\d+) forward passes on .*: (\d+) in the variants above, (\d+) for", text
        ).groups(),
    )
    assert total == in_variants + rest == result.report.passes
    assert in_variants == sum(v.passes for v in result.report.variants)
