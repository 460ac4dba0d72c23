"""Small models written as source for the lint's tests: the lines HP101 reports in them, and
the module class they define, built to run in torch."""

from __future__ import annotations

import textwrap

from torch import nn

from halfprec.leaks.lint import lint_source

HEAD = "import torch\nfrom torch import nn\n\n\n"


def hp101_lines(body: str, head: str = HEAD) -> list[int]:
    """The lines of ``body`` (after ``head``'s imports, 1-based in ``body``) HP101 reports."""
    offset = head.count("\n")
    found = lint_source(head + textwrap.dedent(body))
    return [f.line - offset for f in found if f.code == "HP101"]


def model_class(body: str, name: str, head: str = HEAD) -> type[nn.Module]:
    """The ``nn.Module`` class ``name`` that ``head`` + ``body`` defines."""
    space: dict[str, object] = {}
    exec(compile(head + textwrap.dedent(body), "<model>", "exec"), space)  # noqa: S102
    made = space[name]
    assert isinstance(made, type) and issubclass(made, nn.Module)
    return made
