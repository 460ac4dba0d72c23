"""The test tree's own rules (docs/development.md, "Where tests go").

No test file covers two subpackages, except ``tests/integration/``: a test that drives the
command line lives in ``tests/cli/``, and each folder of tests mirrors a package of the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support import ROOT, TESTS

SRC_PACKAGE = ROOT / "src" / "halfprec"
# the folders whose tests may run the CLI: the CLI's own, and the end-to-end ones
CLI_FOLDERS = ("cli", "integration")
# folders of tests that mirror no package: helpers, data files, end-to-end tests, and the
# testbed of benchmarks/testbed
NOT_MIRRORED = {
    "support": "helpers shared by the tests",
    "fixtures": "data files the tests read",
    "integration": "tests across subpackages",
    "testbed": "benchmarks/testbed, outside the package",
}
# what it takes to drive the CLI from a test
CLI_MODULES = ("support.cli", "halfprec.cli", "click.testing")
CLI_NAMES = {"run_cli", "run_cli_subprocess", "CliRunner"}
CLI_FIXTURE = "cli"


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.parts)


def _uses_of_the_cli(tree: ast.AST) -> list[str]:
    """What in ``tree`` runs the CLI: imports of it, its runners by name, the ``cli`` fixture."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.startswith(CLI_MODULES)]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module}.{a.name}" for a in node.names]
            if any(n.startswith(CLI_MODULES) for n in [node.module or "", *names]):
                found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Name) and node.id in CLI_NAMES:
            found.append(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            if any(a.arg == CLI_FIXTURE for a in args):
                found.append(f"the {CLI_FIXTURE!r} fixture in {node.name}")
    return sorted(set(found))


def cli_uses_outside_the_cli_tests() -> dict[str, list[str]]:
    """Each test file outside tests/cli and tests/integration that runs the CLI, and how."""
    uses = {}
    for path in _test_files():
        rel = path.relative_to(TESTS)
        if rel.parts[0] in CLI_FOLDERS:
            continue
        found = _uses_of_the_cli(ast.parse(path.read_text(), str(path)))
        if found:
            uses[rel.as_posix()] = found
    return uses


def unmirrored_test_folders(tests: Path = TESTS, package: Path = SRC_PACKAGE) -> list[str]:
    """Folders of ``tests`` with no package of the same path under ``package``."""
    folders = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = folder.relative_to(tests)
        if rel.parts[0] in NOT_MIRRORED or "__pycache__" in rel.parts:
            continue
        if not (package / rel / "__init__.py").is_file():
            folders.append(rel.as_posix())
    return folders


def test_only_cli_and_integration_tests_run_the_cli() -> None:
    uses = cli_uses_outside_the_cli_tests()
    assert not uses, (
        "these test files run the CLI; move those tests to tests/cli/test_<command>.py "
        f"(shared helpers to tests/support/): {uses}"
    )


def test_test_folders_mirror_the_source() -> None:
    folders = unmirrored_test_folders()
    assert not folders, (
        f"tests/{folders} match no package under src/halfprec/; put the tests in the folder "
        "of the package they test, or in tests/integration/ if they cover several"
    )


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    # the rules above pass only if they can fail: each way of running the CLI is seen
    sources = {
        "from support.cli import run_cli": ["from support.cli import ..."],
        "import halfprec.cli": ["import halfprec.cli"],
        "from click.testing import CliRunner": ["from click.testing import ..."],
        "def test_x(cli, tmp_path): pass": ["the 'cli' fixture in test_x"],
        "from support import cli": ["from support import ..."],
        "def f():\n    return run_cli_subprocess('x')": ["run_cli_subprocess"],
        "def test_y(tmp_path):\n    client = 1": [],
    }
    for source, want in sources.items():
        assert _uses_of_the_cli(ast.parse(source)) == want, source
    # a folder of tests whose package is missing, or only a plain folder, is seen
    tests, package = tmp_path / "tests", tmp_path / "pkg"
    for folder in ("convert", "convert/extra", "misc", "support/x", "plain"):
        (tests / folder).mkdir(parents=True)
    (package / "convert").mkdir(parents=True)
    (package / "convert" / "__init__.py").write_text("")
    (package / "plain").mkdir()
    assert unmirrored_test_folders(tests, package) == ["convert/extra", "misc", "plain"]
    # every folder the mirror rule excuses exists
    assert all((TESTS / name).is_dir() for name in NOT_MIRRORED)
