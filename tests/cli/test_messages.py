"""Every fix a message suggests names something that exists: each ``--flag`` written in
halfprec's source is an option of the command line, and a ``halfprec CMD ...`` line
written there parses as that command's arguments (issue 39: "pass the format", with no
such option in ``check``)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import click
import pytest

from support import FIXTURES, SRC
from support.cli import run_cli

FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*[a-z0-9]")
# flags of other programs that halfprec's text names, by file: pip's, the memory worker's
# own argparse (python -m halfprec.bench.worker), openvino-telemetry's opt_in_out
FOREIGN = {
    "io/zoo.py": {"--no-deps"},
    "bench/worker.py": {"--model", "--variant", "--batch-size", "--recipe"},
    "runtimes/ov_telemetry.py": {"--opt_out"},
}
COMMAND_LINE = re.compile(r"`halfprec ([a-z]+)((?: [^`]*)?)`")


def _options_by_command() -> dict[str, set[str]]:
    from halfprec.cli import _COMMANDS, main

    ctx = click.Context(main)
    found = {"": {o for p in main.params for o in p.opts} | {"--help"}}
    for name in _COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None
        found[name] = {"--help", "-h"} | {
            o for p in command.params for o in [*p.opts, *getattr(p, "secondary_opts", [])]
        }
    return found


@functools.cache
def _texts() -> list[tuple[str, int, str]]:
    """Every string literal in halfprec's source (f-strings' literal parts included)."""
    found = []
    root = SRC / "halfprec"
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((where, node.lineno, node.value))
    return found


def test_every_flag_a_message_names_is_an_option() -> None:
    every = set().union(*_options_by_command().values())
    wrong = [
        f"{where}:{line}: {flag}"
        for where, line, text in _texts()
        for flag in FLAG.findall(text)
        if flag not in every and flag not in FOREIGN.get(where, set())
    ]
    assert wrong == []


def test_every_halfprec_command_line_in_a_message_names_its_own_options() -> None:
    """```halfprec tune -o recipe.json``` and the like: the command exists and every flag
    written after it is one of that command's."""
    options = _options_by_command()
    wrong = []
    for where, line, text in _texts():
        for name, rest in COMMAND_LINE.findall(text):
            if name not in options:
                wrong.append(f"{where}:{line}: no command {name}")
                continue
            wrong += [
                f"{where}:{line}: halfprec {name} has no {flag}"
                for flag in re.findall(r"(?<![\w-])-{1,2}[a-z][\w-]*", rest)
                if flag not in options[name]
            ]
    assert wrong == []


@pytest.mark.parametrize("name", ["model.bin", "model", "archive.tar.gz"])
def test_check_artifact_with_an_unknown_suffix_names_the_path_and_a_real_fix(
    tmp_path: Path, name: str
) -> None:
    artifact = tmp_path / name
    artifact.write_bytes(b"\0" * 16)
    proc = run_cli("check", f"{FIXTURES / 'user_model.py'}:build", "--artifact", str(artifact))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(artifact) in line and "name the file *.pt2" in line
    check = _options_by_command()["check"]
    assert all(flag in check for flag in FLAG.findall(line)), line
    assert "pass the format" not in line


def test_no_message_offers_format_alone() -> None:
    """``export --format`` must fit ``-o``'s suffix (``--format exported-program -o x.onnx``
    is refused), so a fix names the file to write (``-o NAME.pt2``), not the flag."""
    offers = [
        f"{where}:{line}"
        for where, line, text in _texts()
        if re.search(r"--format (exported-program|torchscript|onnx)", text)
    ]
    assert offers == []


def test_check_refuses_an_artifact_s_unknown_suffix_before_building_the_model(
    tmp_path: Path,
) -> None:
    factory = tmp_path / "slow_model.py"
    factory.write_text("def build():\n    raise RuntimeError('the model was built')\n")
    artifact = tmp_path / "model.bin"
    artifact.write_bytes(b"\0" * 16)
    proc = run_cli("check", f"{factory}:build", "--artifact", str(artifact))
    assert proc.returncode == 2, proc.stderr
    assert "cannot tell the export format" in proc.stderr
    assert "the model was built" not in proc.stderr
