"""The test tree's own rules (docs/development.md, "Where tests go").

No test file covers two subpackages, except ``tests/integration/``: a test that drives the
command line lives in ``tests/cli/``, and each folder of tests mirrors a package of the source.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support import ROOT, TESTS

SRC_PACKAGE = ROOT / "src" / "halfprec"
# the folders whose tests may run the CLI: the CLI's own, and the end-to-end ones
CLI_FOLDERS = ("cli", "integration")
# test files outside them that may, and why
CLI_FILES = {"test_docs.py": "runs the docs' own halfprec command lines"}
# folders of tests that mirror no package: helpers, data files, end-to-end tests, and the
# testbed package of models shared with the benchmark scripts
NOT_MIRRORED = {
    "support": "helpers shared by the tests",
    "fixtures": "data files the tests read",
    "integration": "tests across subpackages",
    "testbed": "hazard and breadth models shared with benchmarks/, and their tests",
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
        if rel.parts[0] in CLI_FOLDERS or rel.as_posix() in CLI_FILES:
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


# -- the source's own shape ----------------------------------------------------------------
MAX_FUNCTION_LINES = 80


def long_functions(package: Path = SRC_PACKAGE) -> list[str]:
    """Every function (method, nested function) in ``package`` longer than the limit, from
    its ``def`` line to its last line, as ``path:line name (N lines)``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    rel = path.relative_to(package.parent).as_posix()
                    found.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_over_80_lines() -> None:
    found = long_functions()
    assert not found, f"split these functions into steps of at most 80 lines: {found}"


def _all_names(path: Path) -> list[str]:
    """The names in the ``__all__`` of the module at ``path`` (empty without one)."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _definitions(path: Path) -> set[str]:
    """The names the module at ``path`` defines itself (not by an import)."""
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def stray_reexports(package: Path = SRC_PACKAGE) -> list[str]:
    """Names in the ``__all__`` of a module that neither defines them nor is a package
    above the module that does: ``halfprec.convert`` may re-export
    ``halfprec.convert.core.convert`` and ``halfprec`` may too, a sibling module may not.
    A name listed by a module that defines its own object of that name (each CLI module's
    ``command``) is that module's own."""
    paths = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    defined = {module: _definitions(path) for module, path in paths.items()}
    stray = []
    for module, path in paths.items():
        for name in _all_names(path):
            if name in defined[module]:
                continue
            homes = sorted(m for m, names in defined.items() if name in names)
            above = path.name == "__init__.py" and any(h.startswith(module + ".") for h in homes)
            if not above:
                stray.append(f"{name} in {module}.__all__ (defined in {homes})")
    return sorted(stray)


def test_names_are_reexported_only_by_the_packages_above_them() -> None:
    stray = stray_reexports()
    assert not stray, (
        "list each name in the __all__ of the module that defines it and, for the public "
        f"API, of the packages above it; import it from its home elsewhere: {stray}"
    )


def test_the_shape_checks_see_what_they_look_for(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub.leaf import thing\n__all__ = ['thing']\n")
    (pkg / "sub" / "__init__.py").write_text(
        "from pkg.sub.leaf import thing\n__all__ = ['thing']\n"
    )
    (pkg / "sub" / "leaf.py").write_text(
        "def thing():\n    pass\n\nOTHER = 1\n__all__ = ['thing', 'OTHER']\n"
    )
    (pkg / "sub" / "side.py").write_text(
        "from pkg.sub.leaf import OTHER\ndef command(): pass\n__all__ = ['OTHER', 'command']\n"
    )
    (pkg / "other.py").write_text("def command(): pass\n__all__ = ['command']\n")
    assert stray_reexports(pkg) == ["OTHER in pkg.sub.side.__all__ (defined in ['pkg.sub.leaf'])"]
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(pkg) == [f"pkg/long.py:5 long ({MAX_FUNCTION_LINES + 1} lines)"]


HISTORY = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b[Ww]as \d|\(was\b")


def history_in_source(package: Path = SRC_PACKAGE) -> list[str]:
    """Lines of ``package`` that date a measurement or tell what a value was (``was 7``,
    ``(was 1.58x)``), as ``path:line``: the code states what is; history and dated
    numbers go to docs/benchmarks.md and CHANGELOG.md."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{path.relative_to(package.parent).as_posix()}:{number}")
    return found


def test_the_source_states_what_is_not_its_history(tmp_path: Path) -> None:
    found = history_in_source()
    assert not found, (
        "say what is and why in a sentence; move dates and former values to "
        f"docs/benchmarks.md or CHANGELOG.md: {found}"
    )
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "# measured 2026-12-02\nx = 1  # was 7 before\ny = 2  # (was slower)\nwas_set = 3\n"
    )
    assert history_in_source(tmp_path / "pkg") == ["pkg/m.py:1", "pkg/m.py:2", "pkg/m.py:3"]


FIRST_LINE_COPY = re.compile(r"str\((exc|err|error|e)\)\.strip\(\)\.splitlines\(\)")


def test_an_exception_is_shown_in_one_line_by_modules_first_line() -> None:
    copies = [
        f"{path.relative_to(SRC_PACKAGE.parent).as_posix()}:{number}"
        for path in sorted(SRC_PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FIRST_LINE_COPY.search(line)
    ]
    assert not copies, f"use halfprec.modules.first_line(exc) instead of a copy: {copies}"
    assert FIRST_LINE_COPY.search("first = (str(exc).strip().splitlines() or [t])[0]")


# -- benchmarks/ is a suite of scripts, not a library the tests lean on --------------------
BENCHMARKS = ROOT / "benchmarks"


def unlisted_benchmarks(folder: Path = BENCHMARKS) -> list[str]:
    """The scripts under ``folder`` that its README.md does not name by their path."""
    readme = (folder / "README.md").read_text() if (folder / "README.md").is_file() else ""
    scripts = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.py"))
    return [s for s in scripts if f"`{s}`" not in readme]


def imports_of_benchmarks(tests: Path = TESTS, folder: Path = BENCHMARKS) -> list[str]:
    """Each test-tree module that imports a module of ``folder`` by name, as ``path: name``."""
    names = {p.stem for p in folder.rglob("*.py")} | {
        p.name for p in folder.rglob("*") if p.is_dir() and (p / "__init__.py").is_file()
    }
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            rel = path.relative_to(tests).as_posix()
            found += [f"{rel}: {top}" for top in tops if top in names]
    return sorted(set(found))


def test_benchmarks_readme_lists_every_script() -> None:
    missing = unlisted_benchmarks()
    assert not missing, (
        f"add a line for each of {missing} to benchmarks/README.md: what it measures and "
        "the command that runs it (a one-off investigation goes to benchmarks/archive/)"
    )


def test_no_test_imports_from_benchmarks() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert not any("benchmarks" in p for p in config["ini_options"]["pythonpath"])
    found = imports_of_benchmarks()
    assert not found, (
        "tests import these benchmark modules; move what they share to tests/testbed/ or "
        f"tests/support/: {found}"
    )


RAW_CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns"}


def raw_clock_reads(folder: Path = BENCHMARKS) -> list[str]:
    """Each read of a bare ``time`` clock in the code of ``folder``'s scripts (a program text
    in a string, run in a child before torch is imported, is not their code), as
    ``path:line``. Scripts time through :mod:`halfprec.timing` (``Stopwatch``, ``now``),
    which waits for the device."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in RAW_CLOCKS
                and isinstance(node.value, ast.Name)
                and node.value.id == "time"
            ):
                found.append(f"{path.relative_to(folder).as_posix()}:{node.lineno}")
    return found


def test_benchmarks_time_through_the_device_aware_clock() -> None:
    found = raw_clock_reads()
    assert not found, (
        f"time these with halfprec.timing (Stopwatch(device) or now(device)), which "
        f"synchronises the device: {found}"
    )


def test_the_benchmark_checks_see_what_they_look_for(tmp_path: Path) -> None:
    bench, tests = tmp_path / "benchmarks", tmp_path / "tests"
    (bench / "archive").mkdir(parents=True)
    tests.mkdir()
    for name in ("a.py", "b.py", "archive/c.py"):
        (bench / name).write_text("")
    (bench / "README.md").write_text("| `a.py` | ... |\n| `archive/c.py` | ... |\nb.py\n")
    assert unlisted_benchmarks(bench) == ["b.py"]
    (tests / "test_x.py").write_text("import os\nfrom a import f\nfrom testbed.b import g\n")
    (tests / "test_y.py").write_text("import c.sub\nfrom . import a\n")
    assert imports_of_benchmarks(tests, bench) == ["test_x.py: a", "test_y.py: c"]
    (bench / "a.py").write_text(
        "import time\nt = time.perf_counter()\nCHILD = 'time.perf_counter()'\n"
        "u = time.time()\nv = clock.time()\n"
    )
    assert raw_clock_reads(bench) == ["a.py:2", "a.py:4"]


# -- a run that skipped everything checked nothing ------------------------------------------
@pytest.mark.slow  # three pytest subprocesses (no torch: about a second each)
def test_a_run_whose_every_test_was_skipped_fails(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_one():\n    pytest.skip('needs a GPU')\n"
    )
    (tmp_path / "test_mixed.py").write_text(
        "import pytest\n\ndef test_skipped():\n    pytest.skip('no')\n\ndef test_ran():\n    pass\n"
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(TESTS)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-p", "support.skip_guard", "-p", "no:xdist", *args]
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )

    skipped = run("test_skips.py")
    assert skipped.returncode == 1, skipped.stdout
    assert "all 1 selected tests were skipped, so nothing was checked" in skipped.stdout
    assert run("test_skips.py", "--allow-all-skipped").returncode == 0
    assert run("test_mixed.py").returncode == 0  # one test ran: the run checked something


# -- the public surface: the packages' __all__, listed in docs/architecture.md --------------
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SURFACE_LINE = re.compile(r"^- `(halfprec(?:\.\w+)*)`: (.*)$")


def documented_surface(text: str) -> dict[str, list[str]]:
    """The names each package lists under "The public surface" of architecture.md."""
    section = text.split("## The public surface", 1)[-1].split("\n## ", 1)[0]
    return {
        m.group(1): re.findall(r"`([\w.]+)`", m.group(2))
        for m in map(SURFACE_LINE.match, section.splitlines())
        if m
    }


def packages_with_all(package: Path = SRC_PACKAGE) -> list[str]:
    """Every package of ``package`` whose ``__init__`` declares ``__all__``."""
    return sorted(
        _module_name(p, package) for p in package.rglob("__init__.py") if _declares_all(p)
    )


def _declares_all(path: Path) -> bool:
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for node in ast.parse(path.read_text(), str(path)).body
    )


def test_the_public_surface_is_the_one_the_docs_list() -> None:
    import importlib

    documented = documented_surface(ARCHITECTURE.read_text())
    assert sorted(documented) == packages_with_all(), (
        "docs/architecture.md's 'The public surface' lists one line per package with an "
        f"__all__: listed {sorted(documented)}, declared {packages_with_all()}"
    )
    for name, listed in documented.items():
        actual = list(importlib.import_module(name).__all__)
        assert listed == actual, f"{name}.__all__ is {actual}; docs/architecture.md lists {listed}"


def leaf_modules_listing_everything(package: Path = SRC_PACKAGE) -> list[str]:
    """Modules (not packages) whose ``__all__`` lists every public name they define."""
    found = []
    for path in sorted(package.rglob("*.py")):
        names = _all_names(path)
        if path.name == "__init__.py" or not names:
            continue
        public = {n for n in _definitions(path) if not n.startswith("_")}
        if set(names) >= public:
            found.append(path.relative_to(package.parent).as_posix())
    return found


def test_leaf_modules_declare_no_all_that_lists_everything() -> None:
    found = leaf_modules_listing_everything()
    assert not found, (
        "drop these modules' __all__ (it lists every name they define, so it states "
        f"nothing; the public surface is the packages' __all__): {found}"
    )


def test_the_surface_checks_see_what_they_look_for(tmp_path: Path) -> None:
    text = "## The public surface\n\n- `halfprec`: `a`, `b`\n- `halfprec.x`: `c`\n\n"
    text += "## Next\n- `halfprec.y`: `d`\n"
    assert documented_surface(text) == {"halfprec": ["a", "b"], "halfprec.x": ["c"]}
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("__all__ = ['a']\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("x = 1\n")
    assert packages_with_all(tmp_path / "pkg") == ["pkg"]
    (tmp_path / "pkg" / "sub" / "every.py").write_text("def f(): pass\n_g = 1\n__all__ = ['f']\n")
    (tmp_path / "pkg" / "sub" / "some.py").write_text("def f(): pass\nh = 1\n__all__ = ['f']\n")
    (tmp_path / "pkg" / "sub" / "none.py").write_text("def f(): pass\n")
    assert leaf_modules_listing_everything(tmp_path / "pkg") == ["pkg/sub/every.py"]
