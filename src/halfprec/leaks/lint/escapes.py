"""Values that leave the expression that made them by a way the walk did not see
(see :mod:`.fate`), each a fact of data flow, not of names:

- *a forward that takes a TensorDict* (``forward(self, td: TensorDict)``): the dict holds the
  model's tensors, so what the module returns is the model's, as for a floating input;
- *a function that returns its argument*: ``nn.init.xavier_uniform_(t)`` (every in-place
  initialiser of ``torch.nn.init``) fills ``t`` and returns ``t`` itself, so
  ``nn.init.normal_(torch.zeros(n, d)).repeat(b, 1, 1)`` goes on as the factory's tensor;
- *a scatter that overwrites*: ``torch.zeros(b, n).scatter_(1, idx, 1)`` writes the number
  into the fp32 buffer (a one-hot mask of 0 and 1), which counts nothing; it goes on as a
  floating tensor (``logits - 1e8 * mask``). ``scatter_add_`` of numbers is a counter;
- *an object built from what holds it*: ``Batch.from_data_list(records)`` (a class's
  ``from_*`` constructor, a class of another file) holds the records' tensors, as
  ``Data(edge_attr=t)`` holds ``t`` (see ``arguments._returned_record``);
- *a forward that returns nothing*: its results are what it keeps on ``self``
  (``self.score = nll + penalty``, read by the training loop), so a value stored into an
  attribute that no method of the class reads is the module's output.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.nodes import walk

Function = ast.FunctionDef | ast.AsyncFunctionDef
_TENSOR_DICTS = frozenset({"TensorDictBase", "TensorDict"})


def tensor_dict_input(fn: object) -> bool:
    """Whether a parameter of ``fn`` is annotated as a ``TensorDict`` (of the model's
    tensors)."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    return any(
        dotted(n).rsplit(".", 1)[-1] in _TENSOR_DICTS
        for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)
        if p.annotation is not None
        for n in walk(p.annotation)
        if isinstance(n, (ast.Name, ast.Attribute))
    )


def filled_in_place(node: ast.AST, call: ast.Call) -> str | None:
    """``"up"`` for ``nn.init.xavier_uniform_(t)`` (``torch.nn.init.X_``, ``init.X_``): an
    in-place initialiser of ``torch.nn.init`` given ``t`` first, which returns ``t``."""
    parts = dotted(call.func).split(".")
    if len(parts) < 2 or parts[-2] != "init" or not parts[-1].endswith("_"):
        return None
    if len(parts) > 2 and parts[-3] != "nn":
        return None
    first = call.args[0] if call.args else None
    first = first or next((k.value for k in call.keywords if k.arg == "tensor"), None)
    return "up" if first is node else None


def overwrites(call: ast.Call, name: str) -> bool:
    """``t.scatter_(dim, idx, value)`` without ``reduce=``: the values replace ``t``'s, so
    the result is no count (``scatter_add_``, ``index_add_``, ``put_(..., accumulate=True)``
    are)."""
    return name == "scatter_" and not any(k.arg == "reduce" for k in call.keywords)


def built_from(node: ast.AST, call: ast.Call, ctx: Context) -> bool:
    """In a ``forward``, ``Batch.from_data_list(ts)``: ``node`` handed to a class's
    alternative constructor (``Cls.from_*``), whose object holds it;
    ``graphs.append(Graph(edge_attr=t))``: a record of a class of another file, built into
    a list."""
    func = call.func
    if not ctx.is_forward:
        return False
    if isinstance(func, ast.Name) and _class_name(func.id):
        holder = ctx.parents.get(id(call))
        method = holder.func if isinstance(holder, ast.Call) else None
        return isinstance(method, ast.Attribute) and method.attr == "append"
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    return _class_name(func.value.id) and func.attr.startswith("from_") and node in call.args


def _class_name(name: str) -> bool:
    """``Batch``, ``HeteroData``: a class by Python's spelling (not ``MAX`` or ``x``)."""
    return name[:1].isupper() and any(c.islower() for c in name)


def returns_nothing(fn: object) -> bool:
    """Whether ``fn`` returns no value anywhere (nested functions aside): a ``forward``
    whose results are the attributes it sets."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        value = node.value if isinstance(node, ast.Return) else None
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            return False
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return False
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return True
