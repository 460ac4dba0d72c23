"""A default made for an omitted floating tensor argument: ``if strengths is None:
strengths = torch.ones(n)`` where ``strengths`` is annotated as a floating tensor
(jaxtyping's ``Float[Tensor, "n"]``). A caller of a half model passes a half tensor there,
so the code after the default expects the model's dtype: the fp32 stand-in reaches the
same ops as a passed tensor would, also where the lint cannot follow it (another file's
function, a method of an object)."""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted

_FLOATING = frozenset({"Float", "Inexact"})  # jaxtyping's floating dtype annotations


def stands_in(node: ast.AST, ctx: Context) -> bool:
    """Whether the factory call ``node`` is bound alone to a parameter annotated as a
    floating tensor, in the body of ``if <that parameter> is None:``."""
    fn = ctx.function
    assign = ctx.parents.get(id(node))
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
        return False
    target = assign.targets[0]
    branch = ctx.parents.get(id(assign))
    if not (isinstance(target, ast.Name) and isinstance(branch, ast.If)):
        return False
    if not (any(s is assign for s in branch.body) and _is_none(branch.test, target.id)):
        return False
    a = fn.args
    param = next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == target.id), None)
    return param is not None and param.annotation is not None and _floating(param.annotation)


def _is_none(test: ast.AST, name: str) -> bool:
    """``name is None``."""
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == name
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _floating(annotation: ast.AST) -> bool:
    """``Float[torch.Tensor, "n"] | None``, ``Optional[Float[Tensor, "n"]]``."""
    return any(
        isinstance(n, ast.Subscript) and dotted(n.value).rsplit(".", 1)[-1] in _FLOATING
        for n in ast.walk(annotation)
    )
