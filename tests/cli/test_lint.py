"""``halfprec lint``: exit codes, JSON, --fix, --diff and --unsafe-fixes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "lint"


def _invoke(*args: str) -> Any:
    from click.testing import CliRunner

    from halfprec.cli import main

    return CliRunner().invoke(main, list(args))


# -- CLI -----------------------------------------------------------------------------------
def test_cli_exit_codes_and_json(tmp_path: Path, cli: Any) -> None:
    clean = cli("lint", str(FIXTURES / "clean.py"))
    assert clean.returncode == 0, clean.stderr
    dirty = cli("lint", str(FIXTURES / "helpers.py"), "--json")
    assert dirty.returncode == 1
    data = json.loads(dirty.stdout)
    assert data["counts"] == {"HP101": 4}
    assert {f["line"] for f in data["findings"]} == {9, 24, 25, 29}
    bad = cli("lint", str(FIXTURES / "clean.py"), "--select", "HP9")
    assert bad.returncode == 2 and "unknown rule code 'HP9'" in bad.stderr


def test_cli_fix_and_diff(tmp_path: Path) -> None:
    target = tmp_path / "helpers.py"
    target.write_text((FIXTURES / "helpers.py").read_text())
    # every template in helpers.py is guessed from a name: its fixes are unsafe
    safe = _invoke("lint", str(target), "--fix")
    assert safe.exit_code == 1 and "4 more with --unsafe-fixes" in safe.output
    assert target.read_text() == (FIXTURES / "helpers.py").read_text()
    diff = _invoke("lint", str(target), "--diff", "--unsafe-fixes")
    assert diff.exit_code == 1
    assert "+            x = y + y.new_zeros(4)" in diff.output
    assert target.read_text() == (FIXTURES / "helpers.py").read_text()  # --diff writes nothing
    fixed = _invoke("lint", str(target), "--fix", "--unsafe-fixes")
    assert fixed.exit_code == 0, fixed.output
    assert target.read_text() == (FIXTURES / "helpers.fixed.py").read_text()
    assert "4 fixed" in fixed.output
    assert _invoke("lint", str(tmp_path / "nope.py")).exit_code == 2


def test_cli_marks_only_what_fix_would_rewrite() -> None:
    plain = _invoke("lint", str(FIXTURES / "constants.py"))
    assert ": HP301 -1e+09 is beyond" in plain.output  # unsafe: not applied by --fix
    assert ": HP302 `torch.finfo`" in plain.output  # its template is guessed: unsafe
    assert ": HP203 [*] `torch.get_default_dtype()`" in plain.output
    unsafe = _invoke("lint", str(FIXTURES / "constants.py"), "--unsafe-fixes")
    assert ": HP301 [*] -1e+09 is beyond" in unsafe.output
