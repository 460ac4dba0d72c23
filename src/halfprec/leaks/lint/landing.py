"""Whether a tensor that holds a large constant puts it into a half tensor.

A constant beyond fp16's range (``-1e9``) is harmless in a tensor that stays fp32: a
``torch.where(m, -1e9, 0.0)`` built in the default dtype and added to half scores promotes
them to fp32 (a dtype leak, not an overflow). It overflows only where it *lands* in a tensor
of the model's dtype. :func:`lands_in_half` follows the tensor forward, as :mod:`.fate`
follows an fp32 tensor, through the arithmetic and reshaping that keep the constant's
magnitude and through every later use of a name it is bound to, and answers True at a
landing:

- a cast to a dtype that is not fp32: ``.to(scores.dtype)``, ``.type(dtype)``,
  ``.half()``, ``.type_as(x)``;
- an in-place op or a store into a floating tensor: ``scores += bias``,
  ``h.add_(bias)``, ``h[:, 0] = bias``.

A path ends without a landing where the constant's magnitude ends (``softmax``, ``exp``,
``sigmoid``: ``exp(-1e9)`` is 0 in any dtype; a comparison; an integer cast), at the
module's output (it leaves in its own dtype), and where the lint cannot see (a call of
another file, a submodule, an attribute): a lint that guesses there cries wolf.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from halfprec import ops
from halfprec.leaks.lint.asked import asked_fp32, factory_made
from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.values import value_of

_MAX_HOPS = 12  # names followed from one tensor
_ENDS = words(
    "softmax sigmoid exp tanh softmin bool long int byte short char item tolist numpy "
    "argmax argmin argsort sort topk isinf isnan isfinite eq ne lt le gt ge logical_not "
    "nonzero any all sign"
)
_LANDS = words("half bfloat16 type_as")
_KEEP_ATTRS = words("T mT H mH data")
_NOT_HALF = words(
    "float32 float float64 double long int int64 int32 int16 int8 uint8 bool short "
    "complex64 complex128 cfloat cdouble"
)


def _named_dtype(arg: ast.AST) -> bool:
    """``.to(arg)``: whether ``arg`` names a dtype that may be half (``x.dtype``,
    ``torch.float16``, a name ``dtype``), not fp32, an integer type or a device."""
    if isinstance(arg, ast.Constant):
        return False  # .to("cuda")
    text = dotted(arg)
    last = text.rsplit(".", 1)[-1]
    if last in _NOT_HALF or "device" in last.lower():
        return False
    return last == "dtype" or last.endswith("_dtype") or last in ("float16", "half", "bfloat16")


class _Walk:
    """One walk forward from the tensor holding the constant."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, int]] = set()
        self.hops = 0
        self.depth = 0

    def floating(self, node: ast.AST, ctx: Context) -> bool:
        return value_of(node, ctx.at(node)) is not None

    def written(self, target: ast.AST, ctx: Context) -> bool:
        """Whether writing into ``target`` in place may write in half: unless it is fp32 on
        purpose (``s = x.float()``, or computed from fp32 the library asks for, see
        :mod:`.asked`) or made by fp32 factories and numbers (``s = 1e10 *
        torch.ones(n).to(device)``), its dtype
        is the model's or the tensor it was computed from."""
        if asked_fp32(target, ctx.at(target)):
            return False  # adv = x.float().clone()
        if self.floating(target, ctx):
            return True
        if ctx.is_upcast(target):
            return False
        bound = ctx.binding_before(target) if isinstance(target, ast.Name) else None
        if bound is not None and factory_made(bound, ctx):
            return False  # 1e10 * torch.ones(n).to(device): made fp32 by plain factories
        return not (isinstance(bound, ast.Call) and _fp32_factory(bound, ctx))

    def climb(self, node: ast.AST, ctx: Context) -> bool:
        """Follow the value of ``node`` up through the expressions around it."""
        parents = ctx.parents
        while True:
            parent = parents.get(id(node))
            if parent is None:
                return False
            step = self.step(node, parent, ctx)
            if step is not None:
                return step
            node = parent
            call = parents.get(id(parent))
            if isinstance(parent, ast.Attribute) and isinstance(call, ast.Call):
                node = call if call.func is parent else node  # t.transpose(1, 2) goes on

    def step(self, node: ast.AST, parent: ast.AST, ctx: Context) -> bool | None:
        """True: lands; False: the path ends; None: the value goes on up."""
        if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Starred, ast.List, ast.Tuple)):
            return None
        if isinstance(parent, ast.IfExp):
            return False if parent.test is node else None
        if isinstance(parent, ast.Subscript):
            return None if parent.value is node else False
        if isinstance(parent, ast.Attribute):
            return self.attribute(parent, ctx)
        if isinstance(parent, ast.keyword):
            call = ctx.parents.get(id(parent))
            return self.argument(node, call, ctx) if isinstance(call, ast.Call) else False
        if isinstance(parent, ast.Call):
            return False if parent.func is node else self.argument(node, parent, ctx)
        if isinstance(parent, ast.stmt):
            return self.statement(node, parent, ctx)
        return False

    def attribute(self, attr: ast.Attribute, ctx: Context) -> bool | None:
        """``t.<attr>`` or ``t.<method>(...)``."""
        call = ctx.parents.get(id(attr))
        if not (isinstance(call, ast.Call) and call.func is attr):
            return None if attr.attr in _KEEP_ATTRS else False
        name = attr.attr
        if name in _LANDS:
            return True
        if name in ("to", "type"):
            wanted = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
            if any(_named_dtype(a) or self.floating(a, ctx) for a in wanted):
                return True
            return (
                False if any(dotted(a).endswith(("long", "int", "bool")) for a in wanted) else None
            )
        if name in _ENDS:
            return False
        return None  # t.transpose(1, 2), t.masked_fill(m, 0), t.float(): the constant goes on

    def argument(self, node: ast.AST, call: ast.Call, ctx: Context) -> bool | None:
        """``t`` passed to ``call``: ``h.add_(t)`` lands it; a torch function keeps it
        (``torch.cat``, ``torch.where``) unless it ends it, and so does a function of this
        file it is the first input of (``_split_into_blocks(t, n)``)."""
        func = call.func
        last = dotted(func).rsplit(".", 1)[-1] if dotted(func) else ""
        if call.args and call.args[0] is node and _of_this_file(func, ctx):
            return None
        if isinstance(func, ast.Attribute):
            receiver = func.value
            if last.endswith("_") and self.written(receiver, ctx):
                return True  # h.add_(t), h.copy_(t): written in h's dtype
            owner = dotted(receiver)
            torch_call = owner in ctx.imports.torch or owner in ctx.imports.functional
            torch_call = torch_call or owner.endswith(("nn.functional", "torch.linalg"))
            if torch_call or isinstance(receiver, ast.Name) and receiver.id != "self":
                return False if last in _ENDS else None
        return False  # a function, method or submodule the walk does not enter

    def statement(self, node: ast.AST, stmt: ast.stmt, ctx: Context) -> bool:
        if isinstance(stmt, ast.AugAssign):
            if stmt.target is node:
                return False
            if self.written(stmt.target, ctx):
                return True  # scores += bias: bias is written in the scores' dtype
            return any(self.follow(n, stmt, ctx) for n in _names(stmt.target))
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            if stmt.value is not node:
                return False  # t[i] = 0: a write into the tensor, not a use of its values
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and self.written(target.value, ctx):
                    return True  # h[:, 0] = t: written in h's dtype
                if any(self.follow(n, stmt, ctx) for n in _names(target)):
                    return True
            return False
        if isinstance(stmt, ast.Return) and not ctx.is_forward:
            return self.callers(ctx)
        return False

    def follow(self, name: str, stmt: ast.stmt, ctx: Context) -> bool:
        key = (name, id(stmt))
        if key in self.seen or self.hops >= _MAX_HOPS:
            return False
        self.seen.add(key)
        self.hops += 1
        return any(self.climb(use, ctx) for use in ctx.uses_after(name, stmt))

    def callers(self, ctx: Context) -> bool:
        """A helper's result, followed on at its calls in the file (two calls deep)."""
        calls, fn = ctx.calls, ctx.function
        if calls is None or self.depth >= 2:
            return False
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        self.depth += 1
        try:
            for site in calls.callers(fn):
                outer = calls.context(site.caller, site.facts, site.is_forward)
                if self.climb(site.call, outer):
                    return True
        finally:
            self.depth -= 1
        return False


def _of_this_file(func: ast.AST, ctx: Context) -> bool:
    """``f(...)`` or ``self.f(...)`` of a function or method this file defines."""
    calls = ctx.calls
    if calls is None:
        return False
    program = calls.program
    if isinstance(func, ast.Name):
        return func.id in program.functions
    is_self = isinstance(func, ast.Attribute) and dotted(func.value) == "self"
    return is_self and isinstance(func, ast.Attribute) and func.attr in ctx.facts.methods


def _fp32_factory(call: ast.Call, ctx: Context) -> bool:
    """``torch.zeros(n)``: a factory without ``dtype``, fp32 in a half model."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and dotted(func.value) in ctx.imports.torch
        and ops.is_factory(func.attr)
        and not any(k.arg == "dtype" for k in call.keywords)
    )


def _names(target: ast.AST) -> Iterator[str]:
    """The names a target binds (``a``, ``a, b``); an attribute or a slice binds none."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _names(elt)


def lands_in_half(node: ast.AST, ctx: Context) -> bool:
    """Whether the tensor made at ``node`` puts its values into a tensor of the model's
    dtype (see the module docstring); ``ctx`` is the walked context of its function. An
    in-place fill (``bias.masked_fill_(m, -1e9)``) is followed on through its receiver's
    later uses."""
    walk = _Walk()
    if walk.climb(node, ctx):
        return True
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Attribute) and func.attr.endswith("_"):
        receiver = func.value
        if isinstance(receiver, ast.Name):
            stmt = ctx.statement_of(node)
            return isinstance(stmt, ast.stmt) and walk.follow(receiver.id, stmt, ctx)
    return False
