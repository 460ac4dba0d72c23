"""``halfprec lint``: exit codes, JSON, --fix, --diff and --unsafe-fixes, and bad settings.

--fix changes only the bytes of the spans it fixes: encodings (PEP 263, BOM), line endings
(CRLF, CR) and form feeds stay; one run reaches the fixed point; an undecodable file is
reported and skipped; links and modes survive; a file it cannot write leaves every file as it
was, or says which were written.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from support import FIXTURES as TEST_FIXTURES
from support.cli import run_cli

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
    # the template of `_mix` (a helper) and of `positions` is guessed from a name: their
    # fixes are unsafe; forward's own are proved (x is forward's first input)
    safe = _invoke("lint", str(target), "--fix")
    assert safe.exit_code == 1
    assert safe.stderr == (
        "4 findings in 1 file: 2 fixed, 2 fixable only with --unsafe-fixes (the fix may "
        "change fp32 values).\n"
    )
    assert "x = y + y.new_zeros(4)" in target.read_text()
    target.write_text((FIXTURES / "helpers.py").read_text())
    diff = _invoke("lint", str(target), "--diff", "--unsafe-fixes")
    assert diff.exit_code == 1
    assert "+            x = y + y.new_zeros(4)" in diff.output
    assert target.read_text() == (FIXTURES / "helpers.py").read_text()  # --diff writes nothing
    fixed = _invoke("lint", str(target), "--fix", "--unsafe-fixes")
    assert fixed.exit_code == 0, fixed.output
    assert target.read_text() == (FIXTURES / "helpers.fixed.py").read_text()
    assert "4 fixed" in fixed.output
    assert _invoke("lint", str(tmp_path / "nope.py")).exit_code == 2
    jobs = _invoke("lint", str(target), "--jobs", "-1")
    assert jobs.exit_code == 2 and "-1 is not in the range x>=0" in jobs.output


def test_cli_marks_only_what_fix_would_rewrite() -> None:
    plain = _invoke("lint", str(FIXTURES / "constants.py"), "--select", "HP")
    assert ": HP301 -1e+09 is beyond" in plain.output  # unsafe: not applied by --fix
    assert ": HP302 [*] `torch.finfo`" in plain.output  # its template is proved: safe
    assert ": HP203 [*] `torch.get_default_dtype()`" in plain.output
    unsafe = _invoke("lint", str(FIXTURES / "constants.py"), "--unsafe-fixes", "--select", "HP")
    assert ": HP301 [*] -1e+09 is beyond" in unsafe.output


def test_a_pyproject_value_of_the_wrong_type_is_one_line_exit_2(tmp_path: Path) -> None:
    # every message: tests/leaks/lint/test_lint.py
    (tmp_path / "pyproject.toml").write_text("[tool.halfprec.lint]\nselect = 5\n")
    model = tmp_path / "model.py"
    model.write_text("import torch\nx = torch.zeros(3)\n")
    before = model.read_bytes()
    result = run_cli("lint", str(model), "--fix", "--unsafe-fixes")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "select = 5 in [tool.halfprec.lint]: must be a list of strings" in result.stderr
    assert "Traceback" not in result.stderr
    assert model.read_bytes() == before


# -- --fix keeps the bytes it does not fix ---------------------------------------------------
# `h = x / 2` is floating whatever x holds, so fixes that inherit h's dtype are safe
_BODY = [
    b"import torch",
    b"from torch import nn",
    b"",
    b"",
    b"class M(nn.Module):",
    b"    def forward(self, x):",
    b"        h = x / 2",
    b"        a = torch.zeros(h.shape)",
    b"        b = torch.rand(",
    b"            4,",
    b"        )",
    b"        return h + a + b + torch.ones(4)",
    b"",
]
_FIXED = {
    b"torch.zeros(h.shape)": b"h.new_zeros(h.shape)",
    b"torch.ones(4)": b"h.new_ones(4)",
}


def _expected(data: bytes, newline: bytes) -> bytes:
    for old, new in _FIXED.items():
        data = data.replace(old, new)
    return data.replace(b"4," + newline, b"4," + newline + b"            dtype=h.dtype," + newline)


def _fix_twice(path: Path) -> bytes:
    """``lint --fix`` twice; the second run must find nothing to change."""
    first = run_cli("lint", str(path), "--fix")
    assert first.returncode == 0, first.stdout + first.stderr
    fixed = path.read_bytes()
    second = run_cli("lint", str(path), "--fix")
    assert second.returncode == 0 and "0 findings" in second.stderr, second.stderr
    assert path.read_bytes() == fixed
    return fixed


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_fix_keeps_line_endings(tmp_path: Path, newline: bytes) -> None:
    data = newline.join(_BODY)
    path = tmp_path / "m.py"
    path.write_bytes(data)
    assert _fix_twice(path) == _expected(data, newline)


def test_fix_keeps_utf8_bom(tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf" + b"\n".join(_BODY)
    path = tmp_path / "m.py"
    path.write_bytes(data)
    fixed = _fix_twice(path)
    assert fixed.startswith(b"\xef\xbb\xbfimport torch")
    assert fixed == _expected(data, b"\n")


def test_fix_keeps_form_feeds_and_reaches_the_fixed_point_in_one_run(tmp_path: Path) -> None:
    # a form feed line inside forward and one before the class: str.splitlines counts them
    # as line breaks and Python does not, so line numbers used to drift
    body = list(_BODY)
    body.insert(4, b"\x0c")
    body.insert(8, b"\x0c")
    data = b"\n".join(body)
    path = tmp_path / "m.py"
    path.write_bytes(data)
    fixed = _fix_twice(path)
    assert fixed.count(b"\x0c") == 2
    assert fixed == _expected(data, b"\n")


def test_fix_keeps_latin1_with_pep263_cookie(tmp_path: Path) -> None:
    body = list(_BODY)
    body.insert(0, b"# -*- coding: latin-1 -*-")
    # a non-ASCII character before the fixed span on the same line: columns count characters
    body[8] = b'        a = ("caf\xe9", torch.zeros(h.shape))[1]  # \xe9t\xe9'
    data = b"\n".join(body)
    path = tmp_path / "m.py"
    path.write_bytes(data)
    fixed = _fix_twice(path)
    assert b'("caf\xe9", h.new_zeros(h.shape))[1]  # \xe9t\xe9' in fixed
    assert fixed == _expected(data, b"\n")


def test_undecodable_file_is_reported_and_skipped_others_fixed(tmp_path: Path) -> None:
    bad = tmp_path / "a_bad.py"
    bad_bytes = (
        b'import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        s = "\xff"\n'
    )
    bad.write_bytes(bad_bytes)
    good = tmp_path / "b_good.py"
    data = b"\n".join(_BODY)
    good.write_bytes(data)
    result = run_cli("lint", str(tmp_path), "--fix")
    assert result.returncode == 1  # the undecodable file is a finding
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{bad}:1:1: HP000 cannot decode")
    assert "PEP 263" in lines[0] and "file skipped" in lines[0]
    assert bad.read_bytes() == bad_bytes
    assert good.read_bytes() == _expected(data, b"\n")
    assert "Traceback" not in result.stderr


def test_symlinked_executable_file_keeps_its_link_and_mode(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    data = b"\n".join(_BODY)
    real.write_bytes(data)
    real.chmod(0o750)
    link = tmp_path / "link.py"
    link.symlink_to(real.name)
    result = run_cli("lint", str(link), "--fix")
    assert result.returncode == 0, result.stdout + result.stderr
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_bytes() == _expected(data, b"\n")
    assert stat.S_IMODE(real.stat().st_mode) == 0o750


def test_fix_refuses_a_read_only_file_and_writes_nothing(tmp_path: Path) -> None:
    data = b"\n".join(_BODY)
    first, locked = tmp_path / "a_first.py", tmp_path / "b_locked.py"
    first.write_bytes(data)
    locked.write_bytes(data)
    locked.chmod(0o444)
    result = run_cli("lint", str(tmp_path), "--fix")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"halfprec: error: lint --fix cannot rewrite {locked} (read-only file); no file was "
        "written: make them writable (chmod u+w) or leave them out of PATHS"
    ]
    assert first.read_bytes() == data and locked.read_bytes() == data
    assert stat.S_IMODE(locked.stat().st_mode) == 0o444


def test_fix_into_a_read_only_file_system_writes_nothing(tiny_fs: Path) -> None:
    import subprocess

    data = b"\n".join(_BODY)
    for name in ("a.py", "b.py"):
        (tiny_fs / name).write_bytes(data)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    result = run_cli("lint", str(tiny_fs / "a.py"), str(tiny_fs / "b.py"), "--fix")
    assert result.returncode == 2 and "no file was written" in result.stderr, result.stderr
    assert all((tiny_fs / n).read_bytes() == data for n in ("a.py", "b.py"))


def test_fix_that_fails_midway_says_what_was_written(tiny_fs: Path) -> None:
    """Disk full on the second file: the first was rewritten, and the error says so."""
    data = b"\n".join(_BODY)
    small, big = tiny_fs / "a_small.py", tiny_fs / "b_big.py"
    small.write_bytes(data)
    padding = b"\n" + b"# " + b"x" * 70 + b"\n"
    # the 64 KiB tmpfs holds 16 pages: a_small.py takes 1, b_big.py (~29 KiB) 8; the new
    # a_small.py fits, the new b_big.py (8 more pages beside the old one) does not
    big.write_bytes(data + padding * 400)
    result = run_cli("lint", str(small), str(big), "--fix")
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert f"could not write {big} (No space left on device)" in line, line
    assert f"rewritten: {small}; not written: {big}" in line
    assert small.read_bytes() == _expected(data, b"\n")


# -- issue 34: the README's `lint src/ --fix` on the commonest transformer pattern -----------
def test_readme_fix_line_fixes_the_block_model_without_extra_flags(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    model = src / "model.py"
    model.write_text((FIXTURES / "issue34.py").read_text())
    result = run_cli("lint", "src/", "--fix", cwd=tmp_path)  # README: lint src/ --fix
    assert result.returncode == 1  # the .float() (HP201) and -1e9 (HP301) are left
    text = model.read_text()
    assert "h = x.new_zeros(x.shape[0], x.shape[2])" in text
    assert "buf = x.new_ones(x.size(0), 1, x.size(2))" in text
    assert "z = x.new_zeros(x.shape)" in text
    assert result.stderr == (
        "6 findings in 1 file: 4 fixed, 1 fixable only with --unsafe-fixes (the fix may change "
        "fp32 values), 1 to fix by hand.\n"
    )


def test_diff_of_a_file_without_final_newline_ends_its_lines(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text(
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n"
        "    def forward(self, x):\n        return x + torch.zeros(x.shape)"
    )
    result = run_cli("lint", str(model), "--diff")
    assert result.returncode == 1
    assert result.stdout.endswith(
        "-        return x + torch.zeros(x.shape)\n\\ No newline at end of file\n"
        "+        return x + x.new_zeros(x.shape)\n\\ No newline at end of file\n"
    )
    assert result.stderr == "1 finding in 1 file: 1 fixable (diff above).\n"


@pytest.mark.parametrize(
    "content",
    ["# caf\xe9\n".encode("latin-1"), b"tool = 1\n", b'[tool]\nhalfprec = "x"\n'],
    ids=["latin-1", "tool-int", "halfprec-str"],
)
def test_a_pyproject_it_cannot_use_is_one_line_exit_2_not_3(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "pyproject.toml").write_bytes(content)
    model = tmp_path / "model.py"
    model.write_text("import torch\n")
    result = run_cli("lint", str(model))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr


def test_a_fifo_named_on_the_command_line_is_one_line_exit_2(tmp_path: Path) -> None:
    from support.special_files import fifo, within

    made = fifo(tmp_path / "x.py")
    result = within(20, lambda: run_cli("lint", str(made)), made)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "FIFO (named pipe)" in result.stderr  # was "0 findings in 0 files", exit 0
