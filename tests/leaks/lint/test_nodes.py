"""The fast tree walk visits what ast.walk visits, in the same order: the rules' results
depend on the order (the first caller, the first use), so it must be the same."""

from __future__ import annotations

import ast
from pathlib import Path

from halfprec.leaks.lint import engine
from halfprec.leaks.lint.nodes import parent_map, walk


def _trees() -> list[ast.AST]:
    """Every node of the lint package's own source that roots a subtree worth walking."""
    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    match = ast.parse("match x:\n    case [1, *rest] | {'k': _}:\n        pass\n")
    kinds = (ast.Module, ast.FunctionDef, ast.expr, ast.stmt, ast.match_case)
    return [n for t in (tree, match) for n in ast.walk(t) if isinstance(n, kinds)]


def test_walk_yields_the_nodes_of_ast_walk_in_its_order() -> None:
    for root in _trees():
        assert [id(n) for n in walk(root)] == [id(n) for n in ast.walk(root)]


def test_parent_map_is_the_map_ast_walk_and_iter_child_nodes_give() -> None:
    for root in _trees():
        expected: dict[int, ast.AST] = {}
        for node in ast.walk(root):
            for child in ast.iter_child_nodes(node):
                expected[id(child)] = node  # shared Load/Store: the last parent reached
        got = parent_map(root)
        assert list(got) == list(expected)
        assert all(got[key] is expected[key] for key in expected)
