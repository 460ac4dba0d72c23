"""The command line starts without torch: ``--version``, ``--help``, usage errors and the
whole of ``lint`` import neither torch, numpy nor halfprec's model code."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from support import ROOT
from support.cli import run_cli

SRC = ROOT / "src"
HEAVY = ("torch", "numpy", "transformers", "safetensors", "halfprec.convert", "halfprec.io.specs")
LIGHT_ENTRIES = [
    "halfprec.cli",
    *(f"halfprec.cli.{p.stem}" for p in (SRC / "halfprec" / "cli").glob("*.py")),
]
LINT_ENTRIES = ["halfprec.leaks.lint", "halfprec.report.json_text"]


def _module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _top_level_imports(tree: ast.Module) -> list[str]:
    """Modules a file imports when it is imported: its body's imports, outside functions,
    classes and ``if TYPE_CHECKING:`` blocks."""
    found: list[str] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
    return found


def imported_at_start(entries: list[str]) -> set[str]:
    """Every module importing ``entries`` brings in (halfprec's own, followed; others named)."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a module's packages are imported first
            prefix = ".".join(parts[:i])
            if prefix in seen or (prefix.startswith("halfprec") and _module_file(prefix) is None):
                continue
            seen.add(prefix)
            path = _module_file(prefix) if prefix.startswith("halfprec") else None
            if path is not None:
                todo += _top_level_imports(ast.parse(path.read_text("utf-8")))
    return seen


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


def test_the_cli_and_lint_import_nothing_heavy_at_start() -> None:
    """Static and fast: what the command modules and lint import as they load."""
    assert _heavy(imported_at_start(LIGHT_ENTRIES + LINT_ENTRIES)) == []


def test_the_static_walk_sees_a_heavy_import() -> None:
    """The walk above follows halfprec's imports: a module known to import torch shows."""
    assert "torch" in imported_at_start(["halfprec.convert.core"])


def test_lint_constant_is_fp16s_largest_value() -> None:
    import torch

    from halfprec.leaks.lint.constants import FP16_MAX

    assert torch.finfo(torch.float16).max == FP16_MAX


def test_help_lists_every_command_and_the_builtin_models() -> None:
    from halfprec.cli import _COMMANDS
    from halfprec.io.spec_names import BUILTIN_MODELS
    from halfprec.io.zoo import BUILTINS

    assert list(BUILTIN_MODELS) == list(BUILTINS)
    proc = run_cli("--help")
    assert proc.returncode == 0
    for name in [*_COMMANDS, *BUILTIN_MODELS]:
        assert f"  {name} " in proc.stdout, name


def test_a_missing_model_file_is_a_usage_error_before_loading() -> None:
    proc = run_cli("check", "no/such/model.py:build")
    assert proc.returncode == 2
    assert "model file no/such/model.py not found" in proc.stderr
    proc = run_cli("bench", "builtin:nope")
    assert proc.returncode == 2 and "choose one of: minilm, bert-base" in proc.stderr


_PROBE = """
import json, sys
from halfprec.cli import main
sys.argv = ["halfprec", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy"))
print("\\nPROBE " + json.dumps({"code": code, "heavy": heavy[:5]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, code",
    [
        (["--version"], 0),
        (["--help"], 0),
        (["check", "--help"], 0),
        (["check", "no/such/model.py:build"], 2),
        (["convert", "missing.pt", "-o", "x.safetensors"], 2),
        (["bench", "--no-such-option"], 2),
        (["export", "--format", "zip", "-o", "x.zip"], 2),
        (["deploy", "-o", "x.txt"], 2),
        (["deploy", "-o", "x.xml", "--runtimes", "none"], 2),
        (["lint", "LINT_FILE"], 1),
        (["lint", "--json", "LINT_FILE"], 1),
        (["lint", "--fix", "--diff", "LINT_FILE"], 1),
    ],
)
def test_a_fresh_interpreter_starts_without_torch(
    args: list[str], code: int, tmp_path: Path
) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text(
        "import torch\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x + torch.zeros(3)\n",
        encoding="utf-8",
    )
    argv = [str(leaky) if a == "LINT_FILE" else a for a in args]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PROBE "))
    probe = json.loads(line.removeprefix("PROBE "))
    assert probe == {"code": code, "heavy": []}, proc.stdout + proc.stderr


def test_the_cli_spells_exports_formats_as_the_library_does() -> None:
    from halfprec.cli.export import FORMATS as CLI_FORMATS
    from halfprec.export import FORMATS

    assert CLI_FORMATS == FORMATS


_CLICKS_DEFAULT = re.compile(r"\[default: [^\]]*\]")


def _commands() -> list[tuple[str, click.Command]]:
    from halfprec.cli import _COMMANDS, main

    ctx = click.Context(main)
    found: list[tuple[str, click.Command]] = [("", main)]
    for name in _COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None
        found.append((name, command))
    return found


def test_every_option_of_every_command_has_help_and_one_spelling_of_the_default() -> None:
    """Every default in ``--help`` is click's ``[default: ...]``, generated from the option
    (its value, or the ``show_default`` text of an option whose default is None); no help
    text spells one another way ("(default: x)", "Default: x", "; default x", ...)."""
    for name, command in _commands():
        options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
        missing = [p.opts[0] for p in options if not p.help]
        assert missing == [], f"{name}: {missing} have no help"
        text = " ".join(run_cli(*filter(None, [name]), "--help").stdout.split())
        rest = _CLICKS_DEFAULT.sub("", text)
        other = re.findall(r"[^.;]{0,40}\bdefault\b[^.;]{0,40}", rest, re.I)
        assert other == [], f"halfprec {name} --help spells a default another way: {other}"
        assert ("[default: builtin:minilm]" in text) == (
            name == "" or any(p.name == "model" for p in command.params)
        ), name


def test_a_default_that_click_shows_is_the_option_s_own() -> None:
    """Each option with a default shows it in its own help line, as click renders it: its
    value, or for an option whose default is None, what leaving it out means."""
    from halfprec.cli import main

    root = click.Context(main, **main.context_settings)
    for name, command in _commands()[1:]:
        ctx = click.Context(command, parent=root, info_name=name)
        for p in command.params:
            if not isinstance(p, click.Option) or p.hidden:
                continue
            value = p.get_default(ctx, call=False)
            unset = value is None or value is False or not isinstance(value, (str, int, float))
            if unset and not isinstance(p.show_default, str):
                continue  # an absent flag, or a repeatable option given no times
            record = p.get_help_record(ctx)
            assert record is not None and "[default: " in record[1], (name, p.opts)
