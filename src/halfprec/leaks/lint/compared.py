"""An integer factory compared with data: the boolean it gives is the data's, not the
factory's own table.

``occ > torch.arange(k)`` of a tensor ``occ`` the module was given (or computed) is a mask
of ``occ``; a later ``.float()`` of it (``torch.stack([occ > ids, occ == ids]).float()``) is
the library's cast of a computed mask, fp32 asked for (docs/leaks.md, the lead's ruling
(b)), and the arange's own values go nowhere but into the comparison. A comparison with a
number (``order < 0``, ``pos >= x.shape[1]``, a parameter annotated ``int``) or with
another factory's values keeps the table the factory's (ruling (a)): its cast is part of
the factory and stays followed.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.reaching import reaching_values

_DEPTH = 8
_JOINS = words("stack cat concat concatenate hstack vstack")
_NUMBERS = words("item size numel dim int len float round abs min max")
_SAME = words(
    "view reshape unsqueeze squeeze expand expand_as flatten transpose permute contiguous to "
    "long int clone detach repeat"
)


def with_data(compare: ast.Compare, node: ast.AST, ctx: Context) -> bool:
    """Whether ``compare`` compares ``node`` (an integer factory's value) with a tensor of
    data (an operand other than ``node`` that is neither a number nor made from factories)
    as one of the comparisons a join stacks (see :func:`stacked`)."""
    others = [o for o in (compare.left, *compare.comparators) if o is not node]
    return stacked(compare, ctx) and any(data(o, ctx) for o in others)


def stacked(compare: ast.Compare, ctx: Context) -> bool:
    """``torch.stack([occ > ids, occ == ids, occ < ids])``: a comparison that is an element
    of the list a join stacks with others, a table of the data's masks. A lone comparison
    (``(torch.arange(n) < lengths).float()``, ``torch.log((pos >= start) * (pos < end))``)
    is left to the factory's walk: judges read those tables as the factory's."""
    seq = ctx.parents.get(id(compare))
    call = ctx.parents.get(id(seq)) if isinstance(seq, (ast.List, ast.Tuple)) else None
    if not (isinstance(call, ast.Call) and call.args and call.args[0] is seq):
        return False
    assert isinstance(seq, (ast.List, ast.Tuple))
    joined = dotted(call.func).rsplit(".", 1)[-1] in _JOINS
    return joined and sum(isinstance(e, ast.Compare) for e in seq.elts) > 1


def data(expr: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether ``expr`` surely holds a tensor that no plain factory made: a parameter that
    is not annotated or defaulted as a number, a slice or reshape of one, a tensor
    attribute of the module, or arithmetic with one."""
    if depth >= _DEPTH:
        return False
    if isinstance(expr, ast.Name):
        values = reaching_values(ctx, expr)
        if not values:
            return _tensor_parameter(expr.id, ctx)
        return all(data(v, ctx, depth + 1) for v in values)
    if isinstance(expr, ast.Subscript):
        shape = isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape"
        return not shape and data(expr.value, ctx, depth + 1)
    if isinstance(expr, ast.BinOp):
        return data(expr.left, ctx, depth + 1) or data(expr.right, ctx, depth + 1)
    if isinstance(expr, ast.Attribute):
        owner = expr.value
        if isinstance(owner, ast.Name) and owner.id == "self":
            return expr.attr in ctx.facts.tensors
        return False
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr in _NUMBERS or expr.func.attr not in _SAME:
            return False
        return data(expr.func.value, ctx, depth + 1)
    return False


def _tensor_parameter(name: str, ctx: Context) -> bool:
    """A parameter of the walked function, not ``self``, that is annotated as no number
    and has no number for its default."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: dict[str, ast.expr | None] = dict(
        zip([p.arg for p in positional][::-1], a.defaults[::-1], strict=False)
    )
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)})
    for p in (*positional, *a.kwonlyargs):
        if p.arg != name or name in ("self", "cls"):
            continue
        if p.annotation is not None and dotted(p.annotation) in ("int", "float", "bool"):
            return False
        default = defaults.get(name)
        return not (isinstance(default, ast.Constant) and default.value is not None)
    return False
