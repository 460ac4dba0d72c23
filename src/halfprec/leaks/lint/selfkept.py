"""A floating tensor kept on ``self`` by the code of a module, read back as that tensor.

``self.w = F.softmax(self.fc(x), dim=2)`` and then ``moments(self.w, pts)`` or ``self.w *
torch.eye(3)`` in the same ``forward``: the attribute holds the value bound to it there,
as a local name would. The walk binds such a value under the key ``self.<attr>`` (never a
Python name, so never a fix's anchor), so a read of ``self.w`` after it is judged as that
value, and a helper the function passes ``self.w`` to takes a floating argument.

Read in another method (``forward`` calls ``self.encode(x)``, which keeps
``self.feature = self.pool(h)``, then ``self.decode()``, which reads it), the attribute is
the value every other method of the class leaves in it: floating (proved) when each such
method ends with a proved floating tensor there, and ``__init__`` sets it to nothing but
``None``. A parameter or buffer is not such an attribute (see :mod:`.classes`), and an
attribute ``__init__`` makes a tensor of stays unknown, as before.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.scope import Function

PREFIX = "self."
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def self_key(node: ast.AST) -> str | None:
    """``"self.w"`` for ``self.w`` (a target or a read); None for anything else."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return PREFIX + node.attr if node.value.id == "self" else None
    return None


def _writes(cls: ast.ClassDef, _lines: list[str]) -> dict[str, list[tuple[Function, bool]]]:
    """Each attribute ``self.<attr>`` the methods of ``cls`` assign, with the method and
    whether the value is ``None`` (``self.w = None``)."""
    out: dict[str, list[tuple[Function, bool]]] = {}
    for method in cls.body:
        if not isinstance(method, _FUNCTIONS):
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets, value = [node.target], node.value or ast.Constant(None)
            else:
                continue
            nothing = isinstance(value, ast.Constant) and value.value is None
            for target in targets:
                for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                    key = self_key(part)
                    if key is not None:
                        out.setdefault(key, []).append((method, nothing))
    return out


def kept_elsewhere(attr: str, ctx: Context) -> bool | None:
    """What ``self.<attr>`` holds where the function of ``ctx`` reads it without having
    kept it: the value each other method of its class leaves there (see the module
    docstring); None when that is not known."""
    calls, fn = ctx.calls, ctx.function
    if calls is None or not isinstance(fn, _FUNCTIONS) or fn.name == "__init__":
        return None
    owner = calls.program.owner_of(fn)
    cls = calls.program.classes.get(owner) if owner else None
    if owner is None or cls is None:
        return None
    scan: Callable[[ast.ClassDef, list[str]], dict[str, list[tuple[Function, bool]]]] = _writes
    writes = calls.per_function(cls, scan).get(PREFIX + attr, [])  # type: ignore[arg-type]
    kept: list[bool | None] = []
    for method, nothing in writes:
        if method.name == "__init__":
            if not nothing:
                return None  # self.state = torch.zeros(n) made at construction: not known
            continue
        if method is fn or nothing:
            continue
        if id(method) in calls.keeping:
            return None  # read while that method is walked
        calls.keeping.add(id(method))
        try:
            facts = calls.program.methods_of(owner)
            facts_here = facts[1] if facts else ctx.facts
            walked = calls.context(method, facts_here, method.name == "forward")
        finally:
            calls.keeping.discard(id(method))
        kept.append(walked.floating.get(PREFIX + attr))
    if not kept or None in kept:
        return None
    return all(kept)
