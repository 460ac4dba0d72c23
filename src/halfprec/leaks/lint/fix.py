"""Apply fixes with libcst, which keeps formatting and comments.

Findings come from ``ast``; each :class:`~.findings.Fix` names the span of the node to
rewrite, and the transformer below rewrites the libcst node with exactly that span.
"""

from __future__ import annotations

from typing import Any

from halfprec.errors import require
from halfprec.leaks.lint.findings import EXPR, KWARG, METHOD, Fix

__all__ = ["apply_fixes"]


def apply_fixes(source: str, fixes: list[Fix]) -> str:
    """``source`` with ``fixes`` applied; fixes whose node is not found are left out."""
    cst: Any = require("libcst", "lint", "halfprec lint --fix")
    from libcst.metadata import MetadataWrapper, PositionProvider

    by_span: dict[tuple[tuple[int, int], tuple[int, int]], list[Fix]] = {}
    for f in fixes:
        by_span.setdefault((f.start, f.end), []).append(f)

    class _Rewrite(cst.CSTTransformer):  # type: ignore[misc,name-defined]
        METADATA_DEPENDENCIES = (PositionProvider,)

        def on_leave(self, original: Any, updated: Any) -> Any:
            if not isinstance(original, cst.BaseExpression):
                return updated
            pos = self.get_metadata(PositionProvider, original, None)
            if pos is None:
                return updated
            key = ((pos.start.line, pos.start.column), (pos.end.line, pos.end.column))
            for f in by_span.pop(key, []):
                updated = _apply(cst, f, updated)
            return updated

    module = MetadataWrapper(cst.parse_module(source))
    return str(module.visit(_Rewrite()).code)


def _apply(cst: Any, fix: Fix, node: Any) -> Any:
    if fix.action == EXPR:
        return cst.parse_expression(fix.text).with_changes(lpar=node.lpar, rpar=node.rpar)
    if not isinstance(node, cst.Call):
        return node
    if fix.action == METHOD:
        return node.with_changes(func=cst.parse_expression(fix.text))
    if fix.action == KWARG:
        args = list(node.args)
        new = cst.Arg(
            keyword=cst.Name(fix.name),
            value=cst.parse_expression(fix.text),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        last = args[-1].comma if args else cst.MaybeSentinel.DEFAULT
        if isinstance(last, cst.Comma):
            # one argument per line with a trailing comma: the new one gets its own line
            between = args[-2].comma if len(args) > 1 else last
            args[-1] = args[-1].with_changes(comma=between)
            new = new.with_changes(comma=last)
        return node.with_changes(args=[*args, new])
    return node
