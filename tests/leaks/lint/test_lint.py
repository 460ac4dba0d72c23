"""halfprec lint: fixture findings, fixes, the fp32-equivalence property, config."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halfprec.batch import call
from halfprec.leaks.lint import LintConfig, LintConfigError, fix_source, lint_paths, lint_source
from halfprec.leaks.lint.config import load_config
from halfprec.tree import map_tensors
from support import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "lint"
NAMES = ["factories", "constants", "casts", "helpers", "clean", "block"]
UNSAFE = LintConfig(select=("HP",), unsafe_fixes=True)
EVERY = LintConfig(select=("HP",))  # the upcast rules HP2 too


def _load(path: Path, source: str | None = None) -> ModuleType:
    name = f"_halfprec_fixture_{path.stem}_{abs(hash(source))}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    exec(compile(source or path.read_text(), str(path), "exec"), module.__dict__)
    sys.modules[name] = module
    return module


def _expected(name: str) -> list[str]:
    return (FIXTURES / f"{name}.expected").read_text().split("\n")[:-1]


@pytest.mark.parametrize("name", NAMES)
def test_fixture_findings_match_expected(name: str) -> None:
    path = FIXTURES / f"{name}.py"
    found = [f"{f.line}:{f.col} {f.code}" for f in lint_source(path.read_text(), str(path), EVERY)]
    assert found == _expected(name)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_fixes_match_expected(name: str) -> None:
    source = (FIXTURES / f"{name}.py").read_text()
    fixed_path = FIXTURES / f"{name}.fixed.py"
    expected = fixed_path.read_text() if fixed_path.exists() else source
    fixed = fix_source(source, UNSAFE)
    assert fixed == expected
    # fixing is idempotent and leaves only findings without a fix
    assert fix_source(fixed, UNSAFE) == fixed
    assert all(f.fix is None for f in lint_source(fixed, config=UNSAFE))


def test_unsafe_fix_needs_opt_in() -> None:
    source = (FIXTURES / "constants.py").read_text()
    safe = fix_source(source, EVERY)
    assert "-1e9" in safe and "-1e10" in safe  # HP301 kept
    # HP302's template `extra` is `mask.to(q.dtype)` of a submodule's output: proved, safe
    assert "floor = torch.finfo(extra.dtype).min" in safe
    # HP203's template `probs` comes from softmax, which always returns floating: safe
    assert "probs.to(probs.dtype)" in safe
    assert "torch.finfo(scores.dtype).min)" in fix_source(source, UNSAFE)


def _to_half(batch: Any) -> Any:
    return map_tensors(lambda t: t.half() if t.is_floating_point() else t, batch)


def _fp32_output(module: ModuleType) -> torch.Tensor:
    model, batch = module.make()
    with torch.no_grad():
        torch.manual_seed(1)
        return call(model.eval(), batch)


def _outputs_fp32_and_fp16(module: ModuleType) -> tuple[torch.Tensor, torch.Tensor]:
    model, batch = module.make()
    model.eval()
    with torch.no_grad():
        torch.manual_seed(1)
        out32 = call(model, batch)
        half = model.half()
        torch.manual_seed(1)
        out16 = call(half, _to_half(batch))
    return out32, out16


@pytest.mark.parametrize("name", ["factories", "constants", "helpers"])
def test_fixed_fixture_same_fp32_outputs_and_runs_fp16(name: str) -> None:
    path = FIXTURES / f"{name}.py"
    original = _load(path)
    fixed = _load(path, (FIXTURES / f"{name}.fixed.py").read_text())
    before = _fp32_output(original)
    after32, after16 = _outputs_fp32_and_fp16(fixed)
    assert torch.equal(before, after32)
    assert after16.dtype == torch.float16 and torch.isfinite(after16).all()
    # the unfixed module leaks: fp16 in, it crashes or hands back fp32
    try:
        _, leaked = _outputs_fp32_and_fp16(original)
    except RuntimeError:
        return
    assert leaked.dtype != torch.float16 or not torch.isfinite(leaked).all()


# -- property: random forward bodies built from leaky statements ---------------------------
_SNIPPETS = [
    "out = out + torch.zeros(h.shape[0], {n})",
    "out = out + torch.ones({n})",
    "out = out * torch.full((h.shape[0], {n}), 0.5)",
    "out = out + torch.tensor([0.25] * {n})",
    "out = out + torch.arange(0, {n} * 0.5, 0.5)",
    "out = out + torch.linspace(-1, 1, {n})",
    "out = out @ torch.eye({n})",
    "out = out + torch.rand(h.shape, generator=None)",
    "out = out.masked_fill(out > 2.5, -1e9).softmax(-1)",
    "out = torch.maximum(out, out.new_full((), torch.finfo(torch.float32).min))",
    "out = out + torch.zeros({n}, device=h.device)",
]


def _module_source(picks: list[int], n: int) -> str:
    body = "\n".join(" " * 8 + _SNIPPETS[i].format(n=n) for i in picks)
    return textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Generated(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear({n}, {n})

            def forward(self, x):
                h = self.proj(x)
                out = h
        {body}
                return out


        def make():
            torch.manual_seed(0)
            return Generated(), torch.randn(3, {n})
        """
    ).format(n=n, body=body)


@settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    picks=st.lists(st.integers(0, len(_SNIPPETS) - 1), min_size=1, max_size=6),
    n=st.integers(2, 6),
)
def test_property_fixed_module_same_fp32_and_runs_fp16(picks: list[int], n: int) -> None:
    source = _module_source(picks, n)
    fixed = fix_source(source, UNSAFE)
    assert not [f for f in lint_source(fixed, config=UNSAFE) if f.code in ("HP101", "HP302")]
    path = Path("generated.py")
    before = _fp32_output(_load(path, source))
    after32, after16 = _outputs_fp32_and_fp16(_load(path, fixed))
    assert torch.equal(before, after32)
    assert after16.dtype == torch.float16


# -- fix safety ---------------------------------------------------------------------------------
_INT_CODES = """\
import torch
from torch import nn


class Dequant(nn.Module):
    def forward(self, x, codes: torch.Tensor):
        return x + torch.full(codes.shape, 0.5)
"""


def test_new_full_on_tensor_of_unknown_dtype_is_unsafe() -> None:
    (finding,) = lint_source(_INT_CODES)
    assert finding.code == "HP101" and finding.fix_safety == "unsafe"
    assert fix_source(_INT_CODES) == _INT_CODES  # a plain --fix leaves it
    unsafe = fix_source(_INT_CODES, LintConfig(unsafe_fixes=True))
    assert "codes.new_full(codes.shape, 0.5)" in unsafe
    # why: with integer codes the rewrite turns 0.5 into 0
    x, codes = torch.zeros(3), torch.tensor([1, 2, 3])
    before, after = ({"torch": torch, "nn": torch.nn} for _ in range(2))
    exec(compile(_INT_CODES, "before.py", "exec"), before)
    exec(compile(unsafe, "after.py", "exec"), after)
    assert before["Dequant"]()(x, codes).tolist() == [0.5, 0.5, 0.5]
    assert after["Dequant"]()(x, codes).tolist() == [0.0, 0.0, 0.0]


# -- suppression and configuration -----------------------------------------------------------
_LEAK = """\
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x):
        a = torch.zeros(3){comment}
        return x.float() * (x + a)
"""


@pytest.mark.parametrize(
    ("comment", "codes"),
    [
        ("", ["HP101", "HP201"]),
        ("  # halfprec: ignore[HP101]", ["HP201"]),
        ("  # halfprec: ignore[HP2]", ["HP101", "HP201"]),  # line 5 has no HP2 finding
        ("  # halfprec: ignore", ["HP201"]),
    ],
)
def test_suppression_comments_per_line_and_rule(comment: str, codes: list[str]) -> None:
    found = lint_source(_LEAK.format(comment=comment), config=EVERY)
    assert [f.code for f in found] == codes


def test_select_and_ignore_take_prefixes() -> None:
    source = _LEAK.format(comment="")
    assert [f.code for f in lint_source(source, config=LintConfig(select=("HP2",)))] == ["HP201"]
    ignored = LintConfig(select=("HP",), ignore=("HP1",))
    assert [f.code for f in lint_source(source, config=ignored)] == ["HP201"]
    assert [f.code for f in lint_source(source)] == ["HP101"]  # HP2 runs only when selected
    with pytest.raises(LintConfigError, match="unknown rule code 'XY1'; use one of HP101"):
        LintConfig(select=("XY1",))


def test_pyproject_config_is_read_and_checked(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.halfprec.lint]\nignore = ["HP201"]\nexclude = ["skip_*"]\n'
    )
    (tmp_path / "model.py").write_text(_LEAK.format(comment=""))
    (tmp_path / "skip_me.py").write_text(_LEAK.format(comment=""))
    config = load_config(tmp_path)
    report = lint_paths([tmp_path], config)
    assert [(Path(f.path).name, f.code) for f in report.findings] == [("model.py", "HP101")]
    assert load_config(tmp_path, ignore=("HP1",)).enabled.isdisjoint({"HP101", "HP102"})
    (tmp_path / "pyproject.toml").write_text('[tool.halfprec.lint]\nselct = ["HP1"]\n')
    with pytest.raises(LintConfigError, match="unknown key.*selct.*allowed: exclude"):
        load_config(tmp_path)


def test_large_constant_on_explicit_fp32_tensor_is_only_the_upcast() -> None:
    source = """\
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x, mask):
        a = mask.float().masked_fill(mask == 0, -1e9)
        b = torch.zeros_like(x, dtype=torch.float32) - 1e38
        c = x.masked_fill(mask == 0, -1e9)
        return a + b + c
"""
    found = [(f.line, f.code) for f in lint_source(source, config=EVERY)]
    assert found == [(5, "HP201"), (6, "HP202"), (7, "HP301")]


def test_syntax_error_is_a_finding_not_a_crash() -> None:
    found = lint_source("def forward(self:\n", "bad.py")
    assert [(f.code, f.path) for f in found] == [("HP000", "bad.py")]


def test_only_files_that_define_forward_are_parsed() -> None:
    # nothing outside a forward path is linted, so a file with no `def forward` is not parsed
    assert lint_source("x = (\n# forward\n", "helpers.py") == []
    # a `\\` continuation between `def` and `forward` is still a definition
    found = lint_source("def \\\n  forward(self:\n", "bad.py")
    assert [f.code for f in found] == ["HP000"]


def test_lf_and_crlf_files_give_the_same_findings() -> None:
    lf = _LEAK.format(comment="").replace(
        "return", "x = x.masked_fill(x > 0, -1e9)\n        return"
    )
    crlf = lf.replace("\n", "\r\n")  # split and searched line by line, not in one pass
    assert [(f.line, f.col, f.code) for f in lint_source(lf, config=EVERY)] == [
        (f.line, f.col, f.code) for f in lint_source(crlf, config=EVERY)
    ]
    assert lint_source(lf, config=EVERY)


def test_fixing_needs_no_libcst(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "libcst", None)  # import libcst now fails
    assert "a = x.new_zeros(3)" in fix_source(_LEAK.format(comment=""), UNSAFE)


@pytest.mark.slow
def test_every_transformers_modeling_file_lints_and_fixes_without_crash() -> None:
    transformers = pytest.importorskip("transformers")
    root = Path(transformers.__file__).parent / "models"
    every = sorted(root.glob("**/modeling_*.py"))
    assert len(every) > 100
    # every 6th file (alphabetical): a fixed, spread sample that keeps the suite fast;
    # benchmarks/lint_transformers.py lints and fixes all of them
    files = every[::6]
    report = lint_paths(files, UNSAFE)
    assert len(report.files) == len(files)
    assert not [f for f in report.findings if f.code == "HP000"]  # every file parsed
    assert report.counts().get("HP101", 0) > 0  # real code does leak
    # every fix applies to real code and leaves no fixable finding behind; sampled to the
    # three smallest files with fixes (the benchmark fixes them all)
    with_fixes = [r for r in report.files if any(f.fix for f in r.findings)]
    for result in sorted(with_fixes, key=lambda r: Path(r.path).stat().st_size)[:3]:
        source = Path(result.path).read_text()
        fixed = fix_source(source, UNSAFE)
        assert fixed != source
        compile(fixed, result.path, "exec")
        assert not [f for f in lint_source(fixed, result.path, UNSAFE) if f.fix is not None]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('unsafe-fixes = "false"', "unsafe-fixes = 'false' in [tool.halfprec.lint]: must be true"),
        ("unsafe-fixes = 1", "unsafe-fixes = 1 in [tool.halfprec.lint]: must be true or false"),
        ("select = 5", "select = 5 in [tool.halfprec.lint]: must be a list of strings"),
        ("exclude = [1, 2]", "exclude = [1, 2] in [tool.halfprec.lint]: must be a list"),
    ],
)
def test_pyproject_values_of_the_wrong_type_name_the_key_and_what_it_must_be(
    tmp_path: Path, line: str, needle: str
) -> None:
    # the CLI's one line for these: tests/cli/test_lint.py
    (tmp_path / "pyproject.toml").write_text(f"[tool.halfprec.lint]\n{line}\n")
    with pytest.raises(LintConfigError, match=re.escape(needle)):
        load_config(tmp_path)


def test_lint_config_types_are_checked_in_python_too() -> None:
    with pytest.raises(LintConfigError, match=r"LintConfig\(unsafe_fixes='false'\): must be"):
        LintConfig(unsafe_fixes="false")  # type: ignore[arg-type]


def test_a_long_sum_that_python_compiles_is_linted() -> None:
    """A 990-term sum once exhausted the rules' recursion (RecursionError)."""
    terms = " + ".join(["x"] * 990)
    source = (
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n"
        f"    def forward(self, x: torch.Tensor):\n        h = {terms}\n"
        "        return h + torch.zeros(3)\n"
    )
    compile(source, "<sum>", "exec")
    assert [f.code for f in lint_source(source)] == ["HP101"]


def test_code_too_deep_for_pythons_parser_is_one_finding() -> None:
    """At the interpreter's default recursion limit (1000) CPython's parser gives up on
    5000 nested terms (RecursionError). The limit is pinned here: inductor raises it to
    2000 for the whole process once anything is compiled (torch/_inductor/compile_fx.py),
    and an earlier test in the same worker may have compiled."""
    terms = " + ".join(["x"] * 5000)
    source = f"import torch\ndef forward(x):\n    return {terms}\n"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        (finding,) = lint_source(source)
    finally:
        sys.setrecursionlimit(limit)
    assert finding.code == "HP000" and "nested too deeply" in finding.message


@pytest.mark.slow  # spawns worker processes
def test_jobs_give_the_same_report_in_the_same_order(tmp_path: Path) -> None:
    for path in sorted(FIXTURES.glob("*.py")):  # files with findings, fixes, and clean ones
        (tmp_path / path.name).write_bytes(path.read_bytes())
        (tmp_path / "sub").mkdir(exist_ok=True)
        (tmp_path / "sub" / path.name).write_bytes(path.read_bytes())
    one = lint_paths([tmp_path], UNSAFE, fix=True)
    assert len(one.files) > 8 and one.findings and any(r.new_bytes for r in one.files)
    for jobs in (2, 0):
        many = lint_paths([tmp_path], UNSAFE, fix=True, jobs=jobs)
        assert many == one  # every file, finding, fix and fixed byte, in order


@pytest.mark.parametrize("jobs", [-1, 1.5, True])
def test_jobs_must_be_a_whole_number_from_zero(jobs: Any) -> None:
    with pytest.raises(ValueError, match="must be a whole number >= 0"):
        lint_paths([FIXTURES], jobs=jobs)
