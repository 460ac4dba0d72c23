"""The fast tree walk visits what ast.walk visits, in the same order: the rules' results
depend on the order (the first caller, the first use), so it must be the same."""

from __future__ import annotations

import ast
from pathlib import Path

from halfprec.leaks.lint import engine
from halfprec.leaks.lint.nodes import children, parent_map, walk


def _trees() -> list[ast.AST]:
    """Every node of the lint package's own source that roots a subtree worth walking."""
    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    match = ast.parse("match x:\n    case [1, *rest] | {'k': _}:\n        pass\n")
    # a node of each class whose name, string or number fields the walk does not read
    scalars = ast.parse(
        "from .a import b as c\nglobal g\nv: int = 1\nw = f'{v!r:>4}' + 1e5j\n"
        "async def h(*, k=2, **kw):\n    return [y async for y in k(a=1, **kw)]\n"
        "class C(B, metaclass=M):\n    try:\n        pass\n    except E as e:\n        q.r = e\n"
    )
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.expr, ast.stmt, ast.match_case)
    return [n for t in (tree, match, scalars) for n in ast.walk(t) if isinstance(n, kinds)]


def test_walk_yields_the_nodes_of_ast_walk_in_its_order() -> None:
    for root in _trees():
        assert [id(n) for n in walk(root)] == [id(n) for n in ast.walk(root)]


def test_children_are_the_nodes_of_iter_child_nodes_in_its_order() -> None:
    for root in _trees():
        for node in ast.walk(root):
            assert [id(n) for n in children(node)] == [id(n) for n in ast.iter_child_nodes(node)]


def test_parent_map_is_the_map_ast_walk_and_iter_child_nodes_give() -> None:
    for root in _trees():
        expected: dict[int, ast.AST] = {}
        for node in ast.walk(root):
            for child in ast.iter_child_nodes(node):
                expected[id(child)] = node  # shared Load/Store: the last parent reached
        got = parent_map(root)
        assert list(got) == list(expected)
        assert all(got[key] is expected[key] for key in expected)
