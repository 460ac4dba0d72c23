"""Walk one forward-path function in statement order, tracking which names hold a
floating tensor, and hand every expression node to the rule checks.

A name holds a floating tensor when it is a parameter annotated ``torch.FloatTensor`` (or
``torch.Tensor`` with a non-index name, never ``Optional``), an unannotated parameter named
like activations (``x``, ``hidden_states``, ``query``...), or is assigned from one through
layer calls (``self.proj(x)``), arithmetic, indexing, or dtype-preserving tensor methods.
Names bound inside a block (``if``/``for``/``with``) are forgotten after it, so a fix never
uses a name that may be unbound. The most recently bound one is the fix *template*.

Each floating name also records whether its dtype is *known* to be the model's floating
dtype, rather than guessed from its name or a ``torch.Tensor`` annotation: a
``torch.FloatTensor`` parameter, and results of true division, of arithmetic with a known
name or a float literal, of ``.float()``, and of ops that always return floating
(``softmax``, ``sigmoid``, ``exp``...). Only a known template makes a fix safe: with a
guessed one, ``torch.full(codes.shape, 0.5)`` -> ``codes.new_full(...)`` turns 0.5 into 0
when ``codes`` holds integers.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from halfprec.leaks.lint.scope import Function, Imports

__all__ = ["Context", "Check", "walk_function", "dotted", "words"]


def words(text: str) -> frozenset[str]:
    """The set of whitespace-separated words of ``text`` (keeps long name tables readable)."""
    return frozenset(text.split())


_INDEX_NAME = re.compile(
    r"(^|_)(ids?|mask|masks|position|positions|index|indices|idx|labels?|lengths?|lens|count|"
    r"cache|shape|size|dim|step|seed|num|bool|token_type)(_|$|s$)",
    re.IGNORECASE,
)
_ACTIVATION_NAMES = words(
    "x h hidden input inputs query key value q k v features feats emb embeddings logits scores "
    "z img image images audio waveform signal tensor xs out output attn_weights attn_output "
    "pixel_values"
)
_KEEPS_DTYPE = words(
    "view reshape transpose permute contiguous flatten unsqueeze squeeze expand expand_as "
    "repeat softmax log_softmax matmul bmm mean sum clone exp sqrt rsqrt pow tanh sigmoid relu "
    "masked_fill narrow detach abs neg mul add sub div clamp tril triu flip roll cumsum "
    "view_as reshape_as type_as to_dense"
)
_FLOAT_RESULT = words(
    "softmax log_softmax sigmoid tanh exp log log1p sqrt rsqrt gelu silu erf layer_norm "
    "group_norm normalize float scaled_dot_product_attention"
)
_CHECKED = (ast.Call, ast.BinOp)
_SPLITS = frozenset({"chunk", "split", "unbind", "tensor_split"})
_TORCH_KEEPS = words(
    "matmul bmm mm einsum softmax log_softmax relu gelu silu tanh sigmoid exp sqrt rsqrt abs cat "
    "stack where add mul sub div baddbmm addmm linear layer_norm dropout transpose permute "
    "reshape flatten clamp pow mean sum cos sin tril triu pad interpolate conv1d conv2d "
    "normalize scaled_dot_product_attention repeat_interleave roll maximum minimum"
)


def dotted(node: ast.AST) -> str:
    """``torch.nn.functional.pad`` for an attribute chain of names; ``""`` otherwise."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


@dataclass
class Context:
    """What the checks see: imports, the floating names bound here, and where to report."""

    imports: Imports
    methods: frozenset[str]
    lines: list[str]
    floating: dict[str, bool] = field(default_factory=dict)  # name -> dtype known
    consumed: set[int] = field(default_factory=set)
    found: list[tuple[ast.AST, str, str, object]] = field(default_factory=list)
    hot_lines: frozenset[int] | None = None  # lines a rule could fire on; None: all

    @property
    def template(self) -> str | None:
        """The floating-tensor name bound most recently, which fixes inherit from."""
        return next(reversed(self.floating), None) if self.floating else None

    @property
    def template_known(self) -> bool:
        """Whether the template's dtype is known to be floating (see the module docstring):
        only then do fixes that inherit its dtype keep fp32 results unchanged."""
        template = self.template
        return template is not None and self.floating[template]

    @property
    def torch_name(self) -> str | None:
        if "torch" in self.imports.torch:
            return "torch"
        return next(iter(sorted(self.imports.torch)), None)

    def is_torch_attr(self, node: ast.AST, *names: str) -> str | None:
        """The attribute name when ``node`` is ``torch.<name>`` for one of ``names``."""
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.imports.torch
            and node.attr in names
        ):
            return node.attr
        return None

    def char_col(self, line: int, byte_col: int) -> int:
        """ast columns count UTF-8 bytes; fixes and reports count characters."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def report(self, node: ast.AST, code: str, message: str, fix: object = None) -> None:
        self.found.append((node, code, message, fix))


Check = Callable[[ast.AST, Context], None]


def _is_float_annotation(ann: ast.expr | None, name: str) -> bool | None:
    """True/False from the annotation; None when there is none."""
    if ann is None:
        return None
    text = dotted(ann)
    if text.endswith("FloatTensor"):
        return True
    if text in ("torch.Tensor", "Tensor"):
        return not _INDEX_NAME.search(name)
    return False


def _param_is_floating(arg: ast.arg, has_default_none: bool) -> bool:
    if has_default_none:
        return False
    known = _is_float_annotation(arg.annotation, arg.arg)
    if known is not None:
        return known
    name = arg.arg
    if _INDEX_NAME.search(name):
        return False
    return name in _ACTIVATION_NAMES or name.endswith(("_states", "_embeds", "hidden"))


def _floating_params(fn: Function) -> dict[str, bool]:
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
    defaults += list(a.defaults)
    pairs = list(zip(positional, defaults, strict=True)) + list(
        zip(a.kwonlyargs, a.kw_defaults, strict=True)
    )
    out: dict[str, bool] = {}
    for arg, default in pairs:
        if arg.arg in ("self", "cls"):
            continue
        none = isinstance(default, ast.Constant) and default.value is None
        if _param_is_floating(arg, none):
            out[arg.arg] = arg.annotation is not None and dotted(arg.annotation).endswith(
                "FloatTensor"
            )
    return out


def _operands(expr: ast.AST) -> tuple[list[ast.AST], bool]:
    """The operands of a chain of arithmetic (``a + b * -c``), found without recursion so
    that a long sum cannot exhaust the stack; and whether a division is among the ops."""
    leaves: list[ast.AST] = []
    divides = False
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.BinOp):
            divides = divides or isinstance(e.op, ast.Div)
            stack += [e.right, e.left]
        elif isinstance(e, ast.UnaryOp):
            stack.append(e.operand)
        else:
            leaves.append(e)
    return leaves, divides


def _is_floating(expr: ast.AST, ctx: Context) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in ctx.floating
    if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
        return any(_is_floating(e, ctx) for e in _operands(expr)[0])
    if isinstance(expr, ast.Subscript):
        return _is_floating(expr.value, ctx)
    if not isinstance(expr, ast.Call):
        return False
    f = expr.func
    args = [*expr.args, *(k.value for k in expr.keywords)]
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
        # a submodule call (self.proj(x)), not one of the class's own helpers
        return f.attr not in ctx.methods and any(_is_floating(x, ctx) for x in expr.args)
    if isinstance(f, ast.Attribute):
        owner = dotted(f.value)
        if (
            owner in ctx.imports.torch
            or owner in ctx.imports.functional
            or owner.endswith("nn.functional")
        ):
            return f.attr in _TORCH_KEEPS and any(_is_floating(_unlist(x), ctx) for x in args)
        return f.attr in _KEEPS_DTYPE and _is_floating(f.value, ctx)
    return False


def _float_literal(expr: ast.AST) -> bool:
    while isinstance(expr, ast.UnaryOp):
        expr = expr.operand
    return isinstance(expr, ast.Constant) and isinstance(expr.value, float)


def _dtype_known(expr: ast.AST, ctx: Context) -> bool:
    """For an expression :func:`_is_floating` accepts: whether its dtype is surely the
    model's floating dtype, not merely guessed."""
    if isinstance(expr, ast.Name):
        return ctx.floating.get(expr.id, False)
    if isinstance(expr, ast.BinOp):
        operands, divides = _operands(expr)
        return (
            divides
            or any(_float_literal(e) for e in operands)
            or any(_is_floating(e, ctx) and _dtype_known(e, ctx) for e in operands)
        )
    if isinstance(expr, ast.UnaryOp):
        while isinstance(expr, ast.UnaryOp):
            expr = expr.operand
        return _dtype_known(expr, ctx)
    if isinstance(expr, ast.Subscript):
        return _dtype_known(expr.value, ctx)
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Attribute):
        return False
    f = expr.func
    if isinstance(f.value, ast.Name) and f.value.id == "self":
        return False  # a submodule may return any dtype
    if f.attr in _FLOAT_RESULT:
        return True
    owner = dotted(f.value)
    if owner in ctx.imports.torch or owner in ctx.imports.functional:
        args = [_unlist(x) for x in (*expr.args, *(k.value for k in expr.keywords))]
        return any(_is_floating(a, ctx) and _dtype_known(a, ctx) for a in args)
    return f.attr in _KEEPS_DTYPE and _dtype_known(f.value, ctx)


def _unlist(expr: ast.AST) -> ast.AST:
    if isinstance(expr, (ast.List, ast.Tuple)) and expr.elts:
        return expr.elts[0]
    return expr


def _target_names(target: ast.AST) -> Iterable[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            yield node.id


def _bind(targets: list[ast.expr], value: ast.AST | None, ctx: Context) -> None:
    floating = value is not None and _is_floating(value, ctx)
    split_of = (
        value.func.value
        if isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _SPLITS
        else None
    )
    split = split_of is not None and _is_floating(split_of, ctx)
    if split_of is not None and split:
        known = _dtype_known(split_of, ctx)
    else:
        known = value is not None and floating and _dtype_known(value, ctx)
    for target in targets:
        simple = isinstance(target, ast.Name)
        unpack = isinstance(target, (ast.Tuple, ast.List)) and split
        for name in _target_names(target):
            ctx.floating.pop(name, None)
            if (simple and floating) or unpack:
                ctx.floating[name] = known


def _headers(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions of a compound statement that are not inside its bodies."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in stmt.items]
    if isinstance(stmt, ast.Try):
        return [h.type for h in stmt.handlers if h.type is not None]
    if isinstance(stmt, ast.Match):
        return [stmt.subject]
    return []


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(stmt, ast.Try):
        return [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
    if isinstance(stmt, ast.Match):
        return [c.body for c in stmt.cases]
    out = [getattr(stmt, "body", []), getattr(stmt, "orelse", [])]
    return [b for b in out if b]


def _scan(nodes: Iterable[ast.AST], ctx: Context, checks: list[Check]) -> None:
    hot = ctx.hot_lines
    for root in nodes:
        first = getattr(root, "lineno", 0)
        last = getattr(root, "end_lineno", None) or first
        if hot is not None and not any(n in hot for n in range(first, last + 1)):
            continue
        for node in ast.walk(root):
            if type(node) in _CHECKED:
                for check in checks:
                    check(node, ctx)


def _walk_block(body: list[ast.stmt], ctx: Context, checks: list[Check]) -> None:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            outer = dict(ctx.floating)
            ctx.floating.update(_floating_params(stmt))
            _walk_block(stmt.body, ctx, checks)
            ctx.floating = outer
            continue
        if isinstance(stmt, ast.ClassDef):
            continue
        headers = _headers(stmt)
        bodies = _bodies(stmt) if headers or isinstance(stmt, ast.Try) else []
        if bodies:
            _scan(headers, ctx, checks)
            before = dict(ctx.floating)
            survivors = set(before)
            known = {k for k, v in before.items() if v}
            for block in bodies:
                ctx.floating = dict(before)
                if isinstance(stmt, (ast.For, ast.AsyncFor)):
                    _bind([stmt.target], None, ctx)
                if isinstance(stmt, (ast.With, ast.AsyncWith)):
                    _bind([i.optional_vars for i in stmt.items if i.optional_vars], None, ctx)
                _walk_block(block, ctx, checks)
                survivors &= set(ctx.floating)
                known &= {k for k, v in ctx.floating.items() if v}
            ctx.floating = {k: k in known for k in before if k in survivors}
            continue
        _scan([stmt], ctx, checks)
        if isinstance(stmt, ast.Assign):
            _bind(stmt.targets, stmt.value, ctx)
        elif isinstance(stmt, ast.AnnAssign):
            _bind([stmt.target], stmt.value, ctx)
        elif isinstance(stmt, ast.Delete):
            for t in stmt.targets:
                _bind([t], None, ctx)


def walk_function(
    fn: Function,
    imports: Imports,
    methods: frozenset[str],
    lines: list[str],
    checks: list[Check],
    hot_lines: frozenset[int] | None = None,
) -> Context:
    """Run ``checks`` over every expression of ``fn``; returns the context with its reports.

    Statements that touch none of ``hot_lines`` are not walked (they still bind names).
    """
    ctx = Context(imports=imports, methods=methods, lines=lines, hot_lines=hot_lines)
    ctx.floating = _floating_params(fn)
    _scan([*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)], ctx, checks)
    _walk_block(fn.body, ctx, checks)
    return ctx
