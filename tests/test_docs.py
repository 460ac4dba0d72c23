"""The docs re-run what they quote: every ```python and ```bash block of README.md and
docs/*.md runs here, or is skipped with a written reason (``SKIP``).

Python blocks run in this process, in a fresh folder, with the small stand-ins of
:mod:`support.doc_model` for the names they take as given (``model``, ``inputs``,
``batches``, ``build``, ...). Bash blocks run their ``halfprec ...`` lines through the CLI in
this process (click's CliRunner), with the stand-in model for ``MODEL``, ``my_model.py:build``
and the like; a line may end in a verdict (exit 0 or 1), never in a usage error or a
traceback. Blocks that name a built-in model (``builtin:minilm``) or compile are slow.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import ROOT, SUPPORT, doc_model
from support.cli import run_cli

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)
STAND_IN = f"{SUPPORT / 'doc_model.py'}:build"
# what the docs write for "your model", each run as the stand-in
MODEL_WORDS = ("MODEL", "my_model.py:build", "model.py:build", "my_pkg.models:build")

# (page, a piece of the block's text) -> why the block does not run here
SKIP: dict[tuple[str, str], str] = {
    # installing and whole test runs: what CI's fresh clone runs (.ci/run)
    ("README.md", "bash scripts/install.sh && scripts/halfprec check"): "installs (CI runs it)",
    ("README.md", "bash scripts/install.sh dev && bash"): "installs and runs every test (CI)",
    ("docs/setup.md", "bash scripts/install.sh        #"): "installs and runs every test (CI)",
    ("docs/setup.md", "scripts/halfprec check"): "needs the installed .venv (CI runs it)",
    ("docs/development.md", "bash scripts/test.sh --all"): "installs and runs every test (CI)",
    ("docs/development.md", "mutmut run"): "a mutation run: hours (docs/development.md)",
    ("docs/benchmarks.md", "env -i HOME=/tmp/sys/home"): "a fresh-clone install (CI runs it)",
    # benchmark scripts: minutes to hours; their numbers carry their command and date
    ("docs/benchmarks.md", "benchmarks/archive/compare_cost.py"): "a run against a commit",
    ("docs/benchmarks.md", "benchmarks/kv_cache.py"): "a benchmark run: real HF models",
    ("docs/benchmarks.md", "benchmarks/hf_matrix.py"): "a benchmark run: real HF models",
    ("docs/benchmarks.md", "benchmarks/archive/watch_overhead.py"): "a benchmark run: timing",
    ("docs/breadth.md", "benchmarks/hf_matrix.py"): "a benchmark run: real HF models",
    ("docs/export.md", "benchmarks/hf_matrix.py"): "a benchmark run: 24 HF architectures",
    ("docs/leaks.md", "benchmarks/lint_transformers.py"): "lints all of transformers: minutes",
    ("docs/leaks.md", "benchmarks/lint_corpus.py"): "downloads a wheel, lints a library",
    ("docs/gpu.md", "bash scripts/gpu-check.sh"): "needs CUDA; its --dry-run is run by "
    "tests/integration/test_gpu_check.py (slow tier)",
    ("docs/bench.md", "benchmarks/suite.py"): "the benchmark suite: 5+ minutes",
    ("docs/training.md", "tests/integration/stress_ddp.py"): "30 torchrun jobs",
    # fragments of a user's code, not programs
    ("docs/conversion.md", "scores = scores.masked_fill("): "a line of a forward method",
    ("docs/training.md", 'if __name__ == "__main__":'): "the end of a torchrun script",
    ("docs/training.md", "accelerator = Accelerator("): "needs accelerate and a prepared loop",
    ("docs/training.md", "MixedPrecisionCallback(TrainConfig("): "a Trainer run on user data",
    ("docs/training.md", "for x, y in batches:\n    with mp.autocast()"): "a user's train loop",
    ("docs/training.md", 'mp = MixedPrecision("fp16", device="cpu"'): "a user's train loop",
    ("docs/export.md", "past_key_values"): "decodes with a user's exported KV-cache model",
    ("docs/export.md", "bart.encoder.pt2"): "decodes with a user's exported BART",
    ("docs/bench.md", "aoti_compile_and_package"): "AOTInductor: a C++ compile, minutes",
    ("docs/bench.md", "BertModel(cfg)"): "a user's checkpoint and model class",
    ("docs/bench.md", 'convert_file("ckpt_dir/"'): "a user's checkpoint folder",
    ("docs/bench.md", "--weights ckpt_dir/"): "a user's checkpoint folder",
    ("docs/bench.md", "make_batch(batch_size"): "a server's warm-up with its own batches",
    ("docs/conversion.md", "./my-llama/"): "a user's Hugging Face checkpoint folder",
}
# (page, a piece of the block's text) -> why the block is slow: it runs in --all only
SLOW: dict[tuple[str, str], str] = {
    ("docs/conversion.md", "halfprec.benchmark(model, inputs, recipe)"): "benchmarks, exports",
    ("docs/bench.md", "halfprec.deploy("): "deploy times every variant",
    ("docs/bench.md", "halfprec.benchmark("): "benchmarks every variant",
    ("docs/bench.md", "halfprec bench "): "benchmarks every variant",
    ("docs/export.md", "halfprec.export("): "exports and times onnxruntime",
    ("docs/export.md", "halfprec export "): "exports to every format",
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    kind: str
    text: str
    imports: str = ""  # the imports of the page's earlier Python blocks, which a reader ran

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(pages: list[Path] = PAGES) -> list[Block]:
    """Every ```python and ```bash block of the pages, with its page and first line."""
    found = []
    for path in pages:
        source = path.read_text()
        imports = ""
        for m in FENCE.finditer(source):
            page = (path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).as_posix()
            line = source[: m.start()].count("\n") + 2
            found.append(Block(page, line, m[1], m[2], imports))
            if m[1] == "python":
                imports += _imports(m[2])
    return found


def _imports(code: str) -> str:
    """The top-level import statements of ``code`` (none where it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ""
    kept = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return "".join(ast.unparse(n) + "\n" for n in kept)


def _reason(table: dict[tuple[str, str], str], block: Block) -> str | None:
    """The reason ``table`` gives for ``block`` (None: it names no piece of the block)."""
    hits = (
        why for (page, piece), why in table.items() if page == block.page and piece in block.text
    )
    return next(hits, None)


def _params() -> Iterator[object]:
    for block in blocks():
        marks = []
        why = _reason(SKIP, block)
        if why is not None:
            marks.append(pytest.mark.skip(reason=why))
        elif _reason(SLOW, block) or "builtin:" in block.text or _bare_check(block):
            marks.append(pytest.mark.slow)  # a real model, or minutes
        yield pytest.param(block, id=block.id, marks=marks)


def _bare_check(block: Block) -> bool:
    """A ``halfprec check`` line without a model runs the built-in MiniLM."""
    return any(cmd[:2] == ["halfprec", "check"] and len(cmd) == 2 for cmd in commands(block))


def commands(block: Block) -> list[list[str]]:
    """The block's command lines, split as the shell would (comments and ``\\`` joins)."""
    text = block.text.replace("\\\n", " ")
    return [words for line in text.splitlines() if (words := shlex.split(line, comments=True))]


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A fresh folder to run a block in, holding what the blocks read: a recipe file, and a
    ``src/`` with a tensor made without a dtype (for ``halfprec lint src/``)."""
    from halfprec import Recipe

    Recipe(dtype="fp16").save(tmp_path / "recipe.json")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "net.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x + torch.zeros(x.shape)\n"
    )
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def run_python(block: Block) -> None:
    namespace = {"__name__": "__doc_block__", **doc_model.namespace()}
    exec(compile(block.imports, f"{block.id} (the page's imports)", "exec"), namespace)  # noqa: S102
    exec(compile(block.text, block.id, "exec"), namespace)  # noqa: S102


def run_bash(block: Block) -> None:
    for words in commands(block):
        if words[0] not in ("halfprec", "scripts/halfprec"):
            raise AssertionError(
                f"{block.id}: {shlex.join(words)!r} is no halfprec command; run it here, or "
                "add the block to SKIP with the reason"
            )
        args = [STAND_IN if w in MODEL_WORDS else w for w in words[1:]]
        result = run_cli(*args)
        assert result.returncode in (0, 1), (
            f"{block.id}: `{shlex.join(words)}` exited {result.returncode}:\n"
            f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        )


@pytest.mark.parametrize("block", list(_params()))
def test_the_docs_blocks_run(block: Block, workdir: Path) -> None:
    if block.kind == "python":
        run_python(block)
    else:
        run_bash(block)


def test_every_skip_names_a_block_that_exists() -> None:
    """A skip whose block was edited away would hide nothing; it goes with its block."""
    found = blocks()
    unused = [key for key in SKIP if not any(b.page == key[0] and key[1] in b.text for b in found)]
    assert not unused, f"these SKIP entries match no block; remove them: {unused}"


def test_a_failing_block_fails(workdir: Path) -> None:
    with pytest.raises(NameError):
        run_python(Block("x.md", 1, "python", "undefined_name + 1\n"))
    # an earlier block's imports hold in a later one, nothing else of it does
    first, second = (b for b in _page_blocks("import math\nvalue = 1\n", "math.pi + value\n"))
    assert second.imports == "import math\n" and not first.imports
    with pytest.raises(NameError, match="'value'"):
        run_python(second)
    with pytest.raises(AssertionError, match="exited 2"):
        run_bash(Block("x.md", 1, "bash", "halfprec check MODEL --dtype fp8\n"))
    with pytest.raises(AssertionError, match="no halfprec command"):
        run_bash(Block("x.md", 1, "bash", "rm -rf build\n"))


def _page_blocks(*codes: str) -> list[Block]:
    """The blocks of a page made of ``codes``, one Python block each (in the cwd)."""
    page = Path.cwd() / "docs" / "page.md"
    page.parent.mkdir(exist_ok=True)
    page.write_text("".join(f"```python\n{code}```\n\n" for code in codes))
    return blocks([page])
