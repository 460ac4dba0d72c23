"""A followed tensor reaching a statement (see :mod:`.fate`): bound to names (each
followed on), written into a slice or an attribute, accumulated into (``t += h``), iterated
over, or returned: to the caller that is being followed, to every caller in the file, or
out of ``forward`` as the module's output.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from halfprec.leaks.lint.aliases import looped_container
from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.escapes import returns_nothing, tensor_dict_input
from halfprec.leaks.lint.indexing import tensor_index
from halfprec.leaks.lint.maskfill import filled_at_mask
from halfprec.leaks.lint.methods import position
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Follow, to_callers, to_holders, to_readers
from halfprec.leaks.lint.stores import shared_store_leak
from halfprec.leaks.lint.wrappers import dict_attribute
from halfprec.leaks.lint.writeback import own_dtype_name, own_dtype_tensor


def statement_step(f: Follow, node: ast.AST, stmt: ast.AST) -> str:
    """``t`` reaches a statement: bound to names (followed), stored, returned."""
    if isinstance(stmt, (ast.Return, ast.Yield, ast.YieldFrom)):
        if f.caller is not None:  # followed into a call: its value goes on in the caller
            caller, call = f.caller
            caller.element, caller.key, ranked = f.element, f.key, caller.ranked
            caller.ranked = ranked or f.ranked  # returned from a branch of its rank
            scalar, caller.scalar = caller.scalar, f.scalar  # return t.sum(): 0-dim there
            caller.climb(call)
            caller.ranked, caller.scalar = ranked, scalar
            return "done"
        if f.zero and _output(f) and not (f.chosen and not f.upcast):
            f.fate.zero_output = True  # a loss module's 0-dim output, whoever holds it
            return "leak"
        if to_callers(f):
            return "done"
        # a module's output, or a helper whose callers are in another file; one the model
        # casts to fp32 on purpose and meets no half tensor on the way (a loss from
        # mask.to(dtype=torch.float)) is fp32 by that cast, whatever the factory's dtype
        if _output(f):
            return "safe" if f.chosen and not f.upcast else "leak"
        return "unknown"
    if isinstance(stmt, ast.Expr):
        return "safe"
    if isinstance(stmt, ast.NamedExpr):
        f.follow_name(stmt.target.id, enclosing(f, stmt))
        return "up"
    if isinstance(stmt, ast.AugAssign):
        if stmt.target is node:
            if f.scalar and f.half_scalar(stmt.value):
                return "leak"  # loss += h.mean(): an fp32 loss of half terms
            return "integer" if _counts(stmt) else "safe"
        if isinstance(stmt.target, ast.Name) and stmt.target.id in f.ctx.complex:
            return "safe"  # spec *= mask: written into a complex tensor
        if f.floating(stmt.target):
            return "safe"  # h += t: stored into half, no fp32 goes on (see .writeback)
        if isinstance(stmt.target, ast.Name) and own_dtype_name(f, stmt.target):
            return "safe"  # g *= t of a tensor g: in place, g keeps its own dtype
        return _bind(f, [stmt.target], stmt)
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return _bind(f, targets, stmt)
    if isinstance(stmt, (ast.For, ast.AsyncFor)) and stmt.iter is node:
        for sub in walk(stmt.target):  # for piece in pieces: each piece is one of them
            if isinstance(sub, ast.Name):
                f.follow_name(sub.id, stmt.iter)  # the body's uses come after the iterable
        return "done"
    return "unknown"


def _output(f: Follow) -> bool:
    """``return`` from the ``forward`` of a module whose output has a half dtype to keep."""
    return f.ctx.is_forward and _holds_half(f.ctx)


def _kept_as_output(f: Follow, target: ast.Attribute) -> bool:
    """``self.X = t`` that no method reads, in a ``forward`` that returns nothing: ``t`` is
    the module's result, read by its caller (see :mod:`.escapes`)."""
    mine = isinstance(target.value, ast.Name) and target.value.id == "self"
    return mine and _output(f) and returns_nothing(f.ctx.function)


def _holds_half(ctx: Context) -> bool:
    """Whether a module's output has a half dtype to keep: its ``forward`` has a floating
    input, or its class a floating tensor or a submodule. A module made only of integers
    and shapes (a random-parameter generator) has none: its output is not the model's."""
    facts = ctx.facts
    held = bool(ctx.floating or ctx.optional or facts.tensors or facts.layers or ctx.modules)
    return held or _tensor_annotated(ctx.function) or tensor_dict_input(ctx.function)


def _tensor_annotated(fn: object) -> bool:
    """A parameter annotated with tensors inside (``Tuple[Tensor, Tensor]``): a loss of
    pairs of outputs."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    return any(
        isinstance(n, ast.Name)
        and n.id == "Tensor"
        or isinstance(n, ast.Attribute)
        and n.attr == "Tensor"
        for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)
        if p.annotation is not None
        for n in walk(p.annotation)
    )


def _counts(stmt: ast.AugAssign) -> bool:
    """``t += 1``: an integer step on a counter."""
    v = stmt.value
    return isinstance(v, ast.Constant) and isinstance(v.value, int)


def _bind(f: Follow, targets: Sequence[ast.expr], stmt: ast.stmt) -> str:
    element, f.element = f.element, None
    if element is not None and len(targets) == 1 and isinstance(targets[0], ast.Tuple):
        elts = targets[0].elts
        targets = [elts[element]] if element < len(elts) else []  # a, t = f(): only t
    for target in targets:
        if isinstance(target, ast.Subscript):
            if shared_store_leak(f, target, stmt):
                return "leak"  # g.edata["w"] = t beside g.ndata["h"] = h (see .stores)
            if f.scalar and filled_at_mask(target, f.ctx):
                continue  # x[x > m] = torch.tensor(inf): a masked fill in x's dtype
            # h[:, 0] = t writes t into h in h's own dtype; into an fp32 tensor it goes on
            if f.floating(target.value) and not dict_attribute(f, target.value):
                if tensor_index(target.slice, f.ctx):
                    return "leak"  # h[idx] = t is index_put_: raises unless t is h's dtype
                continue
            base = target.value
            while isinstance(base, ast.Subscript) and not f.floating(base.value):
                base = base.value  # masks[k]["node"] = t: the dict of dicts holds t
            if isinstance(base, ast.Name) and _made_fp32(f, base):
                continue  # pts[0] = t of pts = torch.zeros(n, dtype=torch.float): its choice
            if isinstance(base, ast.Name) and base is target.value and own_dtype_tensor(f, base):
                continue  # r[:, 0] = r[:, 0] + t: r keeps its own dtype (see .writeback)
            if isinstance(base, ast.Name):
                _follow_holder(f, base.id, target, stmt)
            elif isinstance(target.value, ast.Attribute) and not to_readers(f, target.value):
                f.fate.unknown = True  # self.masks[k] = t: the dict is read where t is
            continue
        if isinstance(target, ast.Attribute):
            if not to_readers(f, target):
                if _kept_as_output(f, target):
                    return "leak"  # self.score = t in a forward that returns nothing
                f.fate.unknown = True  # kept where the lint cannot see it read
            continue
        kept = f.key
        if element is not None and isinstance(target, ast.Name):
            f.key = position(element)  # inputs = f(): t is inputs[element]
        elif isinstance(target, (ast.Tuple, ast.List)) and f.key in _POSITIONS:
            elts = target.elts  # a, mask = inputs: only the name at t's position
            target = elts[_POSITIONS[f.key]] if _POSITIONS[f.key] < len(elts) else ast.Tuple([])
            f.key = None
        for sub in walk(target):
            if isinstance(sub, ast.Name):
                f.follow_name(sub.id, stmt)
        f.key = kept
    return "done"


_POSITIONS = {position(i): i for i in range(16)}


def _made_fp32(f: Follow, name: ast.Name) -> bool:
    """Whether ``name`` holds a factory's tensor given an fp32 dtype on purpose (its last
    binding before: ``pts = torch.zeros(n, dtype=torch.float)``): a value written into it
    is cast to the dtype that the holder's own line chose."""
    last = f.ctx.binding_before(name)
    return isinstance(last, ast.Call) and any(
        k.arg == "dtype" and dotted(k.value) in _FP32 for k in last.keywords
    )


_FP32 = frozenset({"torch.float", "torch.float32", "torch.float64", "torch.double"})


def _follow_holder(f: Follow, name: str, target: ast.Subscript, stmt: ast.stmt) -> None:
    """``cache["buf"] = t``: ``cache`` holds ``t`` under ``"buf"``, so its reads under
    another key (``cache["other"]``) are other values; a parameter ``cache`` is the dict
    each caller passes, so it holds ``t`` there after the call."""
    key = target.slice.value if isinstance(target.slice, ast.Constant) else None
    kept = f.key
    if isinstance(target.value, ast.Name) and isinstance(key, str):
        f.key = key
    try:
        f.follow_name(name, stmt)
        if f.key is not None and not f.fate.leaks:
            to_holders(f, name)
    finally:
        f.key = kept
    follow_looped(f, name, stmt)


def follow_looped(f: Follow, name: str, stmt: ast.stmt) -> None:
    """``for r in regions: r["k"] = t`` (or ``r.append(t)``): ``regions`` holds ``t`` in an
    element, so it is followed from the loop on (see :mod:`.aliases`)."""
    container = looped_container(f.ctx.parents, name, stmt)
    if container is None or f.fate.leaks:
        return
    kept, f.key = f.key, None
    try:
        _follow_container(f, container, stmt)
    finally:
        f.key = kept


def _follow_container(f: Follow, container: ast.expr, stmt: ast.stmt) -> None:
    """Follow the container a loop variable is an element of, from the loop on."""
    loop = f.ctx.parents.get(id(container))
    while loop is not None and not isinstance(loop, (ast.For, ast.AsyncFor)):
        loop = f.ctx.parents.get(id(loop))
    if isinstance(container, ast.Name):
        f.follow_name(container.id, loop if loop is not None else stmt)
    elif isinstance(container, ast.Attribute) and not to_readers(f, container):
        f.fate.unknown = True


def enclosing(f: Follow, node: ast.AST) -> ast.AST:
    parents = f.ctx.parents
    while not isinstance(node, ast.stmt) and id(node) in parents:
        node = parents[id(node)]
    return node
