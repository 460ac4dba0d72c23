"""fp32 the library asks for: the lead's fourth ruling (docs/leaks.md, "fp32 the library
asks for"), used where a factory's tensor meets other values in :mod:`.fate`.

A factory's tensor (``torch.eye(n)``) that meets, before any half value, a value the
library made fp32 or double on purpose carries no fp32 of its own: made half, it would
leave the result fp32 all the same. Such a value is not itself a plain site:

- a factory given ``dtype=torch.float32`` (or ``float64``), ``torch.FloatTensor(...)``;
- ``.double()`` of anything; ``.float()``, ``.type(torch.float)`` or ``.to(torch.float32)``
  of data or of a value computed with it, not of a value made from plain factories and
  numbers alone (``torch.arange(n).float()``, ``torch.cat([pos.sin(), pos.cos()]).float()``
  are part of their factories, judged like bare ones);
- ``.type(dtype)`` where ``dtype`` is a parameter defaulting to ``torch.float32`` that no
  call of the file passes;
- the ``return`` of a same-file helper that hands back only such values;
- the output of a module the model holds called only on such values (:mod:`.fed`);
- arithmetic or a join with such a value (of more than no dimensions: a 0-dim fp32 value
  keeps a half operand half), and the ops whose result has their operands' dtype
  (:mod:`.kept`: ``s.exp()``, ``torch.sum(s, -1)``, ``torch.div(a, n)``).

Seen through reshapes, device moves, element reads, the names a value is bound to (an
element of a tuple too: ``t, w = a, b``, ``_, s = self.top(...)`` of a helper returning
tuples) and the parameters of a function that every call of the file passes such a value.
A factory's own chain cast to double (``torch.tensor([1., -1.]).double()``) is the same
request: :func:`double_chain`.
"""

from __future__ import annotations

import ast

from halfprec import ops
from halfprec.leaks.lint.casts import is_fp32_dtype
from halfprec.leaks.lint.compared import data, stacked
from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.decided import passed
from halfprec.leaks.lint.explicit import helper_returns, through
from halfprec.leaks.lint.fed import fed_asked, handed_through
from halfprec.leaks.lint.kept import kept_operands, raising_inputs
from halfprec.leaks.lint.nodes import arithmetic_leaves
from halfprec.leaks.lint.reaching import reaching_values
from halfprec.leaks.lint.scalars import zero_dim
from halfprec.leaks.lint.transforms import transform_layer
from halfprec.leaks.lint.typed import fp32_default
from halfprec.leaks.lint.values import value_of

_DEPTH = 12  # names and calls followed back from one operand
_MADE_DEPTH = 24  # steps of an expression followed back to the factories it is made from
_JOINS = words("cat stack concat concatenate hstack vstack block_diag")
_TYPES = words("FloatTensor DoubleTensor")
_DOUBLE = words("float64 double DoubleTensor")
_CASTS = words("float to type")
_FILLS = words("index_add_ index_copy_ scatter_ scatter_add_ index_put_ masked_scatter_ copy_")
_WEIGHTLESS = words("Identity Sigmoid Tanh ReLU GELU SiLU Softplus Softmax LogSoftmax Dropout")
_KEEPS = words(
    "sigmoid tanh relu gelu silu softplus exp log log1p sqrt abs neg softmax log_softmax clamp "
    "matmul bmm mm einsum mul add sub div where"
)
_REARRANGES = words("rearrange repeat einops.rearrange einops.repeat")


def asked_fp32(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether ``node`` holds fp32 or double that the library asks for in a value that is
    no plain site (see the module docstring)."""
    node = through(node, ctx)
    if depth >= _DEPTH:
        return False
    if isinstance(node, ast.Name):  # on every path that may reach the read
        values = reaching_values(ctx, node)
        if not values:  # a parameter: what every call of the file passes (.decided)
            return not _number(node, ctx) and passed(node, ctx, asked_fp32, depth)
        parts = [_unpacked(v, node.id, ctx) for v in values]
        if _param(node, ctx) and _branched(values[-1], ctx):  # if c: x = x.float()
            bare = not _number(node, ctx) and passed(node, ctx, asked_fp32, depth)
            if not bare:
                return False  # the parameter as passed reaches the read too
        return all(p and all(asked_fp32(v, c, depth + 1) for v, c in p) for p in parts)
    if isinstance(node, ast.BinOp):  # the operands of a chain, walked without recursion
        leaves = arithmetic_leaves(node)
        return any(asked_fp32(s, ctx, depth) and not zero_dim(s, ctx) for s in leaves)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if ctx.is_torch_attr(func, *_TYPES) is not None:
        return True  # torch.FloatTensor(block_diag(...))
    if ctx.is_torch_attr(func, *ops.FACTORY_OPS) is not None:
        return any(k.arg == "dtype" and is_fp32_dtype(k.value, ctx) for k in node.keywords)
    if isinstance(func, ast.Attribute) and func.attr == "double" and not node.args:
        return True
    if isinstance(func, ast.Attribute) and func.attr in _CASTS and _names_fp32(node, ctx):
        return _chosen(node, ctx) or not reads_factory(func.value, ctx)
    if dotted(func) in _REARRANGES and node.args:
        return asked_fp32(node.args[0], ctx, depth)  # einops: the same values
    if dotted(func).rsplit(".", 1)[-1] in _JOINS:
        pieces = node.args[0].elts if node.args and isinstance(node.args[0], ast.Tuple) else []
        pieces = node.args[0].elts if node.args and isinstance(node.args[0], ast.List) else pieces
        return any(asked_fp32(p, ctx, depth) for p in pieces)
    if any(asked_fp32(o, ctx, depth) and not zero_dim(o, ctx) for o in kept_operands(node, ctx)):
        return not zero_dim(node, ctx)  # torch.sum(p * m.float(), -1), s.exp(): see .kept
    if any(asked_fp32(o, ctx, depth + 1) for o in raising_inputs(node, ctx)):
        return True  # self.gru_cell(i.float(), h) raises in half: see .kept
    if fed_asked(node, ctx, asked_fp32, depth):
        return True  # self.kernel(y.float(), y.float()): see .fed
    if _applied(node, ctx) and node.args:
        return asked_fp32(node.args[0], ctx, depth)  # torch.sigmoid(logits.float())
    if handed_through(node, ctx, asked_fp32, depth):
        return True  # self.flat(y.float()) of a helper returning its input rearranged
    returned = helper_returns(node, ctx)
    return bool(returned) and all(asked_fp32(v, there, depth + 1) for v, there in returned)


def _param(name: ast.Name, ctx: Context) -> bool:
    """Whether ``name`` names a parameter of the walked function."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    return any(p.arg == name.id for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))


def _branched(value: ast.AST, ctx: Context) -> bool:
    """Whether the assignment of ``value`` sits in an ``if``, ``try`` or ``match`` of the
    function: it may not run, so what was bound before it reaches on."""
    node: ast.AST | None = ctx.parents.get(id(value))
    while node is not None and node is not ctx.function:
        if isinstance(node, (ast.If, ast.Try, ast.ExceptHandler, ast.match_case)):
            return True
        node = ctx.parents.get(id(node))
    return False


def _number(name: ast.Name, ctx: Context) -> bool:
    """A parameter annotated as a Python number (``shift: int = 0``): no tensor at all."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        if p.arg == name.id and p.annotation is not None:
            return dotted(p.annotation) in ("int", "float", "bool")
    return False


def _unpacked(value: ast.AST, name: str, ctx: Context) -> list[tuple[ast.AST, Context]]:
    """What ``name`` is bound to by the assignment of ``value``: the element of ``t, w = a,
    b.clone()``, the element of every tuple ``a, s = self.helper(...)`` returns (none where
    a return is no tuple), else ``value`` itself."""
    stmt = ctx.parents.get(id(value))
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    index = next(
        (
            t.elts.index(n)
            for t in targets
            if isinstance(t, ast.Tuple)
            for n in t.elts
            if isinstance(n, ast.Name) and n.id == name
        ),
        None,
    )
    if index is None:
        return [(value, ctx)]
    if isinstance(value, ast.Tuple):
        return [(value.elts[index], ctx)] if index < len(value.elts) else []
    returned = helper_returns(value, ctx) if isinstance(value, ast.Call) else []
    if not all(isinstance(v, ast.Tuple) and index < len(v.elts) for v, _ in returned):
        return []
    return [(v.elts[index], there) for v, there in returned if isinstance(v, ast.Tuple)]


def _applied(call: ast.Call, ctx: Context) -> bool:
    """A torch function or a weight-free callable the module holds (``self.activation_fn``,
    ``F.softplus``): its result has its first input's dtype."""
    func = call.func
    owner = dotted(func.value) if isinstance(func, ast.Attribute) else ""
    if owner in ctx.imports.torch or owner in ctx.imports.functional:
        return func.attr in _KEEPS if isinstance(func, ast.Attribute) else False
    if owner != "self" or not isinstance(func, ast.Attribute):
        return False
    facts = ctx.facts
    held = func.attr in facts.passthrough or func.attr in dict(facts.callables)
    held = held or dict(facts.layers).get(func.attr, "") in _WEIGHTLESS
    return held or transform_layer(ctx, func.attr)


def _names_fp32(call: ast.Call, ctx: Context) -> bool:
    """``x.float()``, ``x.type(torch.float)``, ``x.to(torch.float32)``, ``x.type(dtype)`` of a
    parameter defaulting to fp32 that no call passes."""
    func = call.func
    assert isinstance(func, ast.Attribute)
    if func.attr == "float":
        return not call.args
    values = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
    return any(is_fp32_dtype(v, ctx) or fp32_default(v, ctx) for v in values)


def factory_made(node: ast.AST, ctx: Context, depth: int = 0, tensor: bool = True) -> bool:
    """Whether ``node`` is made from plain factories' values and numbers alone
    (``torch.arange(n)``, ``pos = 1.0 * torch.arange(n)``, ``torch.cat([pos.sin(),
    pos.cos()])``): a cast of it to fp32 is part of those factories, not fp32 asked for.
    ``tensor``: ``node`` stands where a tensor is read (a receiver, a torch function's
    input), so a parameter there is data, not a number."""
    node = through(node, ctx)
    if depth >= _MADE_DEPTH:
        return False
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        if _looped(node, ctx):
            return True  # x.float() for x in pieces: the pieces the walk brought here
        values = reaching_values(ctx, node)
        if not values:  # a parameter: data where a tensor is read, else a number
            return not tensor and value_of(node, ctx) is not True
        return any(factory_made(v, ctx, depth + 1, tensor) for v in values)  # on some path
    if isinstance(node, ast.BinOp):
        return all(factory_made(s, ctx, depth + 1, False) for s in (node.left, node.right))
    if isinstance(node, ast.UnaryOp):
        return factory_made(node.operand, ctx, depth + 1, tensor)
    if isinstance(node, (ast.List, ast.Tuple)):  # [] filled later holds what is appended
        return bool(node.elts) and all(factory_made(e, ctx, depth + 1) for e in node.elts)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if ctx.is_torch_attr(func, *ops.FACTORY_OPS) is not None:
        return not any(k.arg in ("dtype", None) for k in node.keywords)
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    torch_call = dotted(owner) in ctx.imports.torch or dotted(owner) in ctx.imports.functional
    pieces = [p for p in node.args if not isinstance(p, ast.Starred)]
    if not torch_call:
        if not factory_made(owner, ctx, depth + 1):
            return False
        return all(factory_made(p, ctx, depth + 1, False) for p in pieces)
    if not pieces or not factory_made(pieces[0], ctx, depth + 1):
        return False
    return all(factory_made(p, ctx, depth + 1, False) for p in pieces[1:])


def asked_write(target: ast.Subscript, ctx: Context) -> bool:
    """``t[idx] = v`` where ``v`` is fp32 asked for: ``t`` must hold fp32 to take it (a
    write at tensor indices of fp32 into half raises), so its fp32 is asked for too."""
    stmt = ctx.parents.get(id(target))
    if not isinstance(stmt, ast.Assign) or target not in stmt.targets:
        return False
    if _basic(target.slice):
        return False  # pe[:, 0::2] = torch.sin(pos.float()): a copy into pe's own dtype
    return asked_fp32(stmt.value, ctx.at(stmt.value))


def _basic(index: ast.AST) -> bool:
    """An index of slices, ``...``, ``None`` and number literals only (``[:, 0::2]``,
    ``[0]``): a copy into the tensor's storage, never ``index_put_``."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return all(isinstance(p, (ast.Slice, ast.Constant)) for p in parts)


def asked_fill(use: ast.AST, bound_at: ast.AST, ctx: Context) -> bool:
    """Whether ``use`` writes fp32 asked for into the followed tensor, in a statement of the
    block that bound it (so every later read sees the write): ``t[idx] = v.float()``,
    ``t.view(-1).index_add_(0, i, v)`` of such a ``v``."""
    stmt, bound = ctx.statement_of(use), ctx.statement_of(bound_at)
    if stmt is None or bound is None or ctx.parents.get(id(stmt)) is not ctx.parents.get(id(bound)):
        return False
    if isinstance(stmt, ast.Assign) and isinstance(ctx.parents.get(id(use)), ast.Subscript):
        target = ctx.parents[id(use)]
        return target in stmt.targets and asked_write(target, ctx)  # type: ignore[arg-type]
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    if call.func.attr not in _FILLS or through(call.func.value, ctx) is not use:
        return False
    return any(asked_fp32(a, ctx.at(a)) for a in call.args[1:])


def reads_factory(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether ``node`` reads a plain factory's value, directly or through the names it
    reads: ``(offset >= 0)`` of ``offset = ids - torch.arange(n)`` (a cast of it makes the
    factory's table floating, part of that factory)."""
    if depth >= _DEPTH:
        return False
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Compare) and _masks_data(sub, ctx):
            continue  # occ > torch.arange(k): a mask of occ's (see .compared)
        if isinstance(sub, ast.Call) and _plain_call(sub, ctx):
            return True
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            values = [] if _looped(sub, ctx) else reaching_values(ctx, sub)
            if any(reads_factory(v, ctx, depth + 1) for v in values):
                return True
        todo.extend(ast.iter_child_nodes(sub))
    return False


def _masks_data(compare: ast.Compare, ctx: Context) -> bool:
    """A stacked comparison of a tensor of data (that reads no plain factory) with
    anything: its mask is the data's (see :mod:`.compared`)."""
    sides = (compare.left, *compare.comparators)
    return stacked(compare, ctx) and any(data(o, ctx) and not reads_factory(o, ctx) for o in sides)


def _plain_call(call: ast.Call, ctx: Context) -> bool:
    """``torch.<factory>(...)`` without ``dtype=``."""
    if ctx.is_torch_attr(call.func, *ops.FACTORY_OPS) is None:
        return False
    return not any(k.arg in ("dtype", None) for k in call.keywords)


def _looped(name: ast.Name, ctx: Context) -> bool:
    """Whether ``name`` is bound by a comprehension around it (``x.float() for x in xs``)."""
    node: ast.AST | None = ctx.parents.get(id(name))
    while node is not None and not isinstance(node, ast.stmt):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                if any(isinstance(t, ast.Name) and t.id == name.id for t in ast.walk(gen.target)):
                    return True
        node = ctx.parents.get(id(node))
    return False


def asked_cast(call: ast.Call, node: ast.AST, ctx: Context) -> bool:
    """``call`` casts ``node``, a computed value (not a plain factory's own), to fp32:
    ``torch.cat((x.sin(), x.cos())).type(dtype)`` of ``dtype=torch.float32``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _CASTS:
        return False
    return _chosen(call, ctx)


def _chosen(call: ast.Call, ctx: Context) -> bool:
    """``x.type(dtype)`` of a parameter ``dtype=torch.float32`` that no call passes: the
    helper hands back float32 by a choice its callers could change."""
    values = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
    return any(fp32_default(v, ctx) for v in values)


def double_chain(call: ast.Call, ctx: Context) -> bool:
    """``t.double()``, ``t.to(torch.float64)``, ``t.type(torch.DoubleTensor)``: the value
    made double on purpose."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "double":
        return not call.args
    if func.attr not in ("to", "type"):
        return False
    values = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
    return any(dotted(v).rsplit(".", 1)[-1] in _DOUBLE and is_fp32_dtype(v, ctx) for v in values)
