"""What the rule checks see while one forward-path function is walked: the file's imports,
its class's facts, which names hold a floating tensor (and whether that is proved or
guessed), and where to report."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
from halfprec.leaks.lint.scope import Imports

__all__ = ["Context", "Check", "Template", "dotted", "words"]


def words(text: str) -> frozenset[str]:
    """The set of whitespace-separated words of ``text`` (keeps long name tables readable)."""
    return frozenset(text.split())


def dotted(node: ast.AST) -> str:
    """``torch.nn.functional.pad`` for an attribute chain of names; ``""`` otherwise."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


@dataclass(frozen=True)
class Template:
    """The tensor a fix inherits dtype and device from: its source text, and whether its
    dtype is *proved* to be the model's floating dtype (then the fix is safe)."""

    text: str
    known: bool


@dataclass
class Context:
    """What the checks see: imports, the floating names bound here, and where to report.

    ``floating`` maps each name that holds a floating tensor to whether that is proved
    (True) or guessed from a name or a ``torch.Tensor`` annotation (False), in binding
    order. ``optional`` holds inputs that default to None: floating once tested not None.
    ``modules`` are local names bound to submodules (``for layer in self.layers``), and
    ``outputs`` names bound to a submodule's whole result, which may be a tuple.
    """

    imports: Imports
    lines: list[str]
    facts: ClassFacts = NO_FACTS
    floating: dict[str, bool] = field(default_factory=dict)
    optional: dict[str, bool] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    containers: frozenset[str] = frozenset()
    consumed: set[int] = field(default_factory=set)
    found: list[tuple[ast.AST, str, str, object]] = field(default_factory=list)
    hot_lines: frozenset[int] | None = None  # lines a rule could fire on; None: all

    @property
    def methods(self) -> frozenset[str]:
        return self.facts.methods

    @property
    def template(self) -> str | None:
        """The floating-tensor name bound most recently, which fixes inherit from."""
        return next(reversed(self.floating), None) if self.floating else None

    @property
    def template_known(self) -> bool:
        """Whether the template's dtype is proved floating (see :class:`Template`): only
        then do fixes that inherit its dtype keep fp32 results unchanged."""
        template = self.template
        return template is not None and self.floating[template] and template not in self.outputs

    @property
    def torch_name(self) -> str | None:
        if "torch" in self.imports.torch:
            return "torch"
        return next(iter(sorted(self.imports.torch)), None)

    def is_torch_attr(self, node: ast.AST, *names: str) -> str | None:
        """The attribute name when ``node`` is ``torch.<name>`` for one of ``names``."""
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.imports.torch
            and node.attr in names
        ):
            return node.attr
        return None

    def char_col(self, line: int, byte_col: int) -> int:
        """ast columns count UTF-8 bytes; fixes and reports count characters."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def report(self, node: ast.AST, code: str, message: str, fix: object = None) -> None:
        self.found.append((node, code, message, fix))


Check = Callable[[ast.AST, Context], None]
