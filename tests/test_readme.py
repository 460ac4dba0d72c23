"""README and docs/*.md: the Python quick start runs, and every halfprec name they use exists."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from support import ROOT

README = ROOT / "README.md"


@pytest.mark.slow
def test_readme_python_quick_start_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README's Python block as it stands, on the built-in MiniLM it loads itself."""
    from halfprec.convert.core import conversion_report

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no Python block"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102
    assert (tmp_path / "model.safetensors").exists()
    report = conversion_report(namespace["half"])  # type: ignore[arg-type]
    assert report is not None and any(i.endswith("layer.0") for i in report.islands), report
    fresh, model = namespace["fresh"], namespace["model"]
    assert isinstance(fresh, nn.Module) and isinstance(model, nn.Module)
    assert {p.dtype for p in fresh.parameters()} & {torch.float16, torch.bfloat16}
    assert model.training is False and next(model.parameters()).dtype == torch.float32


# -- every halfprec name the pages name exists ---------------------------------------------

PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
DOTTED = re.compile(r"(?<![\w./-])halfprec(?:\.[A-Za-z_]\w*)+")
FROM = re.compile(r"from\s+(halfprec(?:\.\w+)*)\s+import\s+(?:\(([\w\s,]+)\)|([\w ,]+))")
IMPORT = re.compile(r"^\s*import\s+(halfprec(?:\.\w+)*)", re.M)


def _resolves(name: str) -> bool:
    """``halfprec.a.b``: the longest importable module prefix, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _missing(text: str) -> list[str]:
    names = set(DOTTED.findall(text))
    for module, grouped, plain in FROM.findall(text):
        names |= {f"{module}.{n.strip()}" for n in (grouped or plain).split(",") if n.strip()}
    missing = {n for n in names if not _resolves(n)}
    missing |= {f"import {m}" for m in IMPORT.findall(text) if not _importable(m)}
    return sorted(missing)


def test_the_name_check_catches_what_does_not_exist() -> None:
    text = (
        "`halfprec.convert` and `halfprec.no_such_name`\n"
        "from halfprec.bench.results import fastest_variant, no_such_result\n"
        "import halfprec.lint\n"  # a function in halfprec, not a module
    )
    assert _missing(text) == [
        "halfprec.bench.results.no_such_result",
        "halfprec.no_such_name",
        "import halfprec.lint",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_halfprec_name_in_the_docs_exists(page: Path) -> None:
    assert _missing(page.read_text()) == [], f"{page.name} names what halfprec lacks"


SUITE_COUNT = re.compile(r"\b\d+ (?:passed|failed|deselected|tests)\b")


def test_the_docs_state_no_test_suite_counts() -> None:
    """A count of the test suite goes stale with every merge; the test command prints its
    own, so no page states one."""
    found = [
        f"{page.name}: {m.group(0)}"
        for page in PAGES
        for m in SUITE_COUNT.finditer(page.read_text(encoding="utf-8"))
    ]
    assert found == []


# -- README's set-up runs its quick start (scripts/readme-check.sh, a CI step) ---------------


def _readme_blocks() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "readme_blocks", ROOT / "scripts/readme_blocks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_step_runs_readme_quick_start_lines_as_readme_has_them() -> None:
    text = README.read_text()
    after = text.split("\n## Quick start\n", 1)[1]
    block = after.split("```bash\n", 1)[1].split("```", 1)[0]
    expected = [line for line in block.splitlines() if line.strip()]
    assert len(expected) >= 5 and all(line.startswith("scripts/halfprec ") for line in expected)
    blocks = _readme_blocks()
    assert blocks.bash_lines(text, "Quick start") == expected
    assert blocks.bash_lines(text, "Set-up") == [
        "bash scripts/install.sh && scripts/halfprec check"
    ]
    step = (ROOT / "scripts/readme-check.sh").read_text()
    assert "readme_blocks.py setup" in step and "readme_blocks.py quickstart" in step
    assert "python3 -m venv .venv" in step and "git clone" in step
    assert "bash scripts/readme-check.sh" in (ROOT / ".ci/run").read_text()
    if any("my_model.py" in line for line in expected):
        assert "my_model.py" in step


def _default_install_packages() -> set[str]:
    """The distributions a plain ``bash scripts/install.sh`` installs from pyproject's extras."""
    import tomllib

    found = re.search(r'^extras="([\w,]+)"$', (ROOT / "scripts/install.sh").read_text(), re.M)
    assert found, "install.sh sets no default extras"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return {re.split(r"[<>=\[ ]", r)[0] for e in found.group(1).split(",") for r in extras[e]}


def test_plain_install_has_what_each_quick_start_line_uses() -> None:
    quick = "\n".join(_readme_blocks().bash_lines(README.read_text(), "Quick start"))
    packages = _default_install_packages()
    needs = {"--plot": {"matplotlib"}, ".onnx": {"onnx", "onnxruntime", "onnxscript"}}
    for word, wanted in needs.items():
        if word in quick:
            assert wanted <= packages, (
                f"the quick start uses {word}; install.sh lacks {wanted - packages}"
            )
