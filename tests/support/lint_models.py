"""Small models written as source for the lint's tests: what the lint reports in them (lines
counted in the model's own body), and the module class they define, built to run in torch.

A test file names its import lines once, ``LINT = Snippets(HEAD_F)``, and asks
``LINT.found(body)``; ``hp101_lines`` and ``model_class`` are the short forms for ``HEAD``.
``package`` writes a package of several files, for the rules that follow a tensor into another
file.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from halfprec.leaks.lint import Finding, LintConfig, lint_source

HEAD = "import torch\nfrom torch import nn\n\n\n"
HEAD_F = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"


@dataclass(frozen=True)
class Snippets:
    """Model bodies written after ``head``'s import lines, linted under ``config``.

    ``found`` keeps the codes that start with ``prefix`` (every code by default).
    """

    head: str = HEAD
    prefix: str = ""
    config: LintConfig | None = None

    def source(self, body: str) -> str:
        """The whole module: ``head``, then ``body`` dedented."""
        return self.head + textwrap.dedent(body)

    def findings(self, body: str, config: LintConfig | None = None) -> list[tuple[int, Finding]]:
        """Each finding in ``body`` with its line in ``body`` (from 1); ``config`` overrides."""
        offset = self.head.count("\n")
        found = lint_source(self.source(body), config=config or self.config)
        return [(f.line - offset, f) for f in found]

    def found(self, body: str, prefix: str | None = None) -> list[tuple[int, str]]:
        """``(line, code)`` of each finding whose code starts with ``prefix``."""
        keep = self.prefix if prefix is None else prefix
        return [(n, f.code) for n, f in self.findings(body) if f.code.startswith(keep)]

    def messages(self, body: str) -> list[tuple[int, str]]:
        """``(line, message)`` of each HP101 finding."""
        return [(n, f.message) for n, f in self.findings(body) if f.code == "HP101"]

    def lines(self, body: str) -> list[int]:
        """The lines HP101 reports."""
        return [n for n, _ in self.messages(body)]

    def line_of(self, body: str, snippet: str, nth: int = 0) -> int:
        """The line of ``body`` (as :meth:`found` counts) holding ``snippet`` the nth time."""
        lines = [i for i, t in enumerate(textwrap.dedent(body).splitlines(), 1) if snippet in t]
        return lines[nth]

    def model(self, body: str, name: str) -> type[nn.Module]:
        """The ``nn.Module`` class ``name`` that the module defines."""
        space: dict[str, object] = {}
        exec(compile(self.source(body), "<model>", "exec"), space)  # noqa: S102
        made = space[name]
        assert isinstance(made, type) and issubclass(made, nn.Module)
        return made


def hp101_lines(body: str, head: str = HEAD) -> list[int]:
    """The lines of ``body`` (after ``head``'s imports, 1-based in ``body``) HP101 reports."""
    return Snippets(head).lines(body)


def model_class(body: str, name: str, head: str = HEAD) -> type[nn.Module]:
    """The ``nn.Module`` class ``name`` that ``head`` + ``body`` defines."""
    return Snippets(head).model(body, name)


def package(root: Path, files: dict[str, str]) -> Path:
    """``root``, made a package of ``files`` (path under ``root``: text). Each folder from
    ``root`` down to a file gets an empty ``__init__.py`` where ``files`` gives none."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        folder = path.parent
        while True:
            if not (folder / "__init__.py").exists():
                (folder / "__init__.py").write_text("")
            if folder == root:
                break
            folder = folder.parent
    return root
