"""HP101: a tensor factory called in forward without ``dtype``, while a floating tensor to
inherit the dtype from is in scope.

``torch.zeros(n)`` makes fp32 whatever the model's dtype; ``x.new_zeros(n)`` makes x's dtype
on x's device, and is the same call in an fp32 model when x is floating. Rewrites:

- ``torch.zeros/ones/empty/full/tensor(...)`` -> ``x.new_zeros/.../new_tensor(...)``;
- ``torch.rand/randn/eye/linspace/arange(...)`` -> the same call plus ``dtype=x.dtype``.

The template ``x`` is the floating tensor whose ``.shape``/``.size()``/``.device`` the call
reads, else the one bound most recently (:func:`.values.template_for`). The fix is safe when
the data flow proves x floating in the model's dtype (:mod:`.values`): then the new tensor
has the dtype the factory gave it in fp32, and the device of the tensor it is shaped from
(an explicit ``device=`` is kept). It is unsafe (``--unsafe-fixes``) only when x's dtype
is guessed from its name or a ``torch.Tensor`` annotation.

Also skipped: factories whose result leaves the model at once (``.tolist()``, ``.item()``,
``.numpy()``, ``.cpu()``).

Skipped: calls whose result is not floating (``torch.arange(n)`` indices, ``torch.full(size,
0)``, ``torch.tensor(3)``), 0-dim results (``torch.rand([])``: a 0-dim tensor never promotes
a half operand), and calls cast right away (``torch.ones(n, n).tril().bool()``).
"""

from __future__ import annotations

import ast

from halfprec import ops
from halfprec.leaks.lint.asked import double_chain
from halfprec.leaks.lint.casts import is_fp32_dtype, span
from halfprec.leaks.lint.compared import with_data
from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.copied import copies_tensor
from halfprec.leaks.lint.findings import KWARG, METHOD, Fix
from halfprec.leaks.lint.floated import floats_here
from halfprec.leaks.lint.hostfloats import host_floats
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.scalars import integer_tensor, zero_dim_factory
from halfprec.leaks.lint.typed import (
    float_bound,
    float_parameter,
    fp32_default,
    scalar_parameter,
    typed_floats,
)
from halfprec.leaks.lint.values import template_for, value_of

_NEW = {
    "zeros": "new_zeros",
    "ones": "new_ones",
    "empty": "new_empty",
    "full": "new_full",
    "tensor": "new_tensor",
}
_ADD_DTYPE = ops.FACTORY_OPS - _NEW.keys()
_NEW_KWARGS = frozenset({"device", "requires_grad", "layout", "pin_memory"})
_ADD_KWARGS = _NEW_KWARGS | {"generator", "end", "start", "step", "steps", "base"}


def is_floatish(node: ast.AST) -> bool:
    """A literal or expression that is a Python float: ``0.5``, ``-1e9``, ``float("-inf")``,
    ``math.inf``, ``torch.finfo(...).min``, or a list/tuple holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, float)
    if isinstance(node, ast.UnaryOp):
        return is_floatish(node.operand)
    if isinstance(node, ast.BinOp):
        return is_floatish(node.left) or is_floatish(node.right) or isinstance(node.op, ast.Div)
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(is_floatish(e) for e in node.elts)
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "float"
    if isinstance(node, ast.Attribute):
        name = dotted(node)
        return name in _FLOAT_CONSTANTS or (
            node.attr in ("min", "max", "eps", "tiny") and "finfo" in ast.dump(node.value)
        )
    return False


_FLOAT_CONSTANTS = frozenset(
    f"{module}.{name}"
    for module in ("math", "np", "numpy", "torch")
    for name in ("inf", "pi", "e", "tau", "nan")
)
_MATH_FLOAT = words("log log2 log10 log1p exp expm1 sqrt sin cos tan atan pow")


def python_float(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """:func:`is_floatish`, and also a ``math.log(...)`` result or a local name last bound
    to a Python float: ``emb = math.log(theta) / (d - 1)``, then ``torch.arange(d) * -emb``
    is fp32."""
    if is_floatish(node):
        return True
    if depth > 3:
        return False
    if isinstance(node, ast.UnaryOp):
        return python_float(node.operand, ctx, depth + 1)
    if isinstance(node, ast.BinOp):
        return any(python_float(e, ctx, depth + 1) for e in (node.left, node.right))
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        return name.startswith("math.") and name[5:] in _MATH_FLOAT
    if isinstance(node, ast.Name):
        bound = ctx.binding_before(node)
        if bound is None:
            return float_parameter(node.id, ctx)  # offset: float = 0.5
        return python_float(bound, ctx, depth + 1)
    element = _element(node, ctx)
    if element is not None:  # delta = (s / h, s / w): delta[0] is a float
        return python_float(element, ctx, depth + 1)
    return float_attribute(node, ctx)


def _element(node: ast.AST, ctx: Context) -> ast.AST | None:
    """``pair[i]`` of a name last bound to a tuple or list display: its element ``i``."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        return None
    index = node.slice
    if not (isinstance(index, ast.Constant) and type(index.value) is int):
        return None
    bound = ctx.binding_before(node.value)
    if not isinstance(bound, (ast.Tuple, ast.List)) or not -len(bound.elts) <= index.value < len(
        bound.elts
    ):
        return None
    return bound.elts[index.value]


def float_attribute(node: ast.AST, ctx: Context) -> bool:
    """``self.eps`` where the class sets ``self.eps = 1e-6`` or from a float parameter."""
    return (
        isinstance(node, ast.Attribute)
        and dotted(node.value) == "self"
        and node.attr in ctx.facts.floats
    )


def tested_float(value: ast.AST, node: ast.AST, ctx: Context) -> bool:
    """``if isinstance(sigma, float): ... torch.full(size, sigma)``: a name that the test of an
    ``if`` around ``node`` proves a Python float."""
    if not isinstance(value, ast.Name):
        return False
    parents = ctx.parents
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, ast.If) and any(s is child for s in parent.body):
            test = parent.test
            tests = test.values if isinstance(test, ast.BoolOp) else [test]
            if any(_isinstance_float(t, value.id) for t in tests):
                return True
        child, parent = parent, parents.get(id(parent))
    return False


def _isinstance_float(test: ast.AST, name: str) -> bool:
    if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name)):
        return False
    if test.func.id != "isinstance" or len(test.args) != 2:
        return False
    subject, kinds = test.args
    names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    floats = all(isinstance(k, ast.Name) and k.id == "float" for k in names)
    return floats and isinstance(subject, ast.Name) and subject.id == name


def _makes_float(kind: str, call: ast.Call, ctx: Context) -> bool:
    if kind in ("zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace"):
        return True
    if kind == "full":
        fill = call.args[1] if len(call.args) > 1 else _keyword(call, "fill_value")
        floats = fill is not None and (is_floatish(fill) or typed_floats(fill, ctx, scalar=True))
        floats = floats or fill is not None and float_attribute(fill, ctx)
        return floats or fill is not None and tested_float(fill, call, ctx)
    if kind == "tensor":
        data = call.args[0] if call.args else None
        if isinstance(data, (ast.List, ast.Tuple)) and not data.elts:
            return True  # torch.tensor([]): empty, in the default dtype (fp32)
        # torch.tensor(self.weights): floating when self.weights holds a list of floats
        if isinstance(data, ast.Attribute) and dotted(data.value) == "self":
            return data.attr in ctx.facts.float_lists
        if isinstance(data, ast.BinOp) and not _number(data, ctx) and not _listed(data):
            return False  # torch.tensor(0.5 * loss): a copy of a tensor, in its dtype
        if isinstance(data, ast.Name) and float_bound(data.id, ctx.function):
            return True  # l1 = 0.0 on one branch: torch.tensor(l1) is fp32 there
        if isinstance(data, ast.Name):  # gamma: float | Tensor, not a tensor here
            held = scalar_parameter(data.id, call, ctx.function, ctx.parents)
            if held:
                return "float" in held
        if data is not None and host_floats(data, ctx):
            return True  # a list filled with floats, a NumPy array made float32
        return data is not None and (is_floatish(data) or typed_floats(data, ctx))
    # arange: floating when any bound or step is a float, also through a name or a tuple
    return any(python_float(a, ctx) for a in [*call.args, *(k.value for k in call.keywords)])


def _any_dtype(call: ast.Call, ctx: Context) -> bool:
    """``torch.tensor(arrays[i])``, ``torch.tensor(x)``, ``torch.tensor(np.stack(xs))``: data
    whose dtype the source does not show (numpy floats, Python floats or integers); not a
    parameter annotated as integers (``size: tuple[int, int]``)."""
    data = call.args[0] if call.args else None
    if data is None or value_of(data, ctx.at(data)) is not None:
        return False  # torch.tensor(h) of a half tensor: a copy in its dtype
    if isinstance(data, ast.Call):
        return isinstance(data.func, ast.Attribute)
    if isinstance(data, ast.Name):
        return not _known_parameter(data.id, ctx)
    return isinstance(data, ast.Subscript)


def _known_parameter(name: str, ctx: Context) -> bool:
    """``name`` is a parameter of the walked function annotated as integers
    (``size: tuple[int, int]``) or as a tensor alone, which ``torch.tensor`` copies in its
    own dtype."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    param = next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == name), None)
    if param is None or param.annotation is None:
        return False
    names = {dotted(n).rsplit(".", 1)[-1] for n in ast.walk(param.annotation)}
    if names & {"float", "ndarray", "Any", "List", "list", "Sequence"}:
        return False
    return "int" in names or "Tensor" in names


def _listed(node: ast.AST) -> bool:
    """``[0.25] * n``: arithmetic that builds a list."""
    return any(isinstance(n, (ast.List, ast.Tuple)) for n in ast.walk(node))


def _end(node: ast.expr | ast.keyword) -> tuple[int, int]:
    return (node.end_lineno or 0, node.end_col_offset or 0)


def _lone_generator(call: ast.Call) -> bool:
    """``f(x for x in y)``: the generator has no parentheses of its own to add after."""
    return len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.GeneratorExp)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _fp32_from_integer(
    call: ast.AST, ctx: Context, depth: int = 0, masked: bool = False
) -> ast.AST | None:
    """``torch.arange(n) / k``, ``torch.arange(n) * 0.5``, ``torch.arange(n).float()``: an
    integer factory whose value becomes fp32 (true division, a float operand, an upcast, a
    float function such as ``torch.log``), right away or after integer steps through names
    (``pos = shift + torch.arange(n)``, then ``pos / scale``). Returns the expression that
    is fp32, or None. ``masked``: compared with data on the way (see :mod:`.compared`), so
    an explicit cast is the library's cast of the data's mask, not the factory's."""
    node: ast.AST = call
    parents = ctx.parents
    # the integer values alone, not yet met with an operand whose dtype they may take
    alone = _ranked(call, ctx)
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            outer = parents.get(id(parent))
            if not (isinstance(outer, ast.Call) and outer.func is parent):
                return None
            if double_chain(outer, ctx):
                return None  # made double on purpose (see .asked): not a plain site
            if parent.attr in ("float", "double") and not outer.args:
                return None if masked else outer
            if parent.attr in ("to", "type") and any(
                is_fp32_dtype(a, ctx) or fp32_default(a, ctx)
                for a in (*outer.args, *(k.value for k in outer.keywords))
            ):
                return None if masked else outer
            if floats_here(node, parent, ctx) and alone:
                return outer  # torch.tensor([n]).log(): floats of an integer tensor
            if parent.attr not in _INT_KEEPS or _casts(outer):
                return None
            node = outer
            continue
        if isinstance(parent, ast.BinOp):
            other = parent.right if parent.left is node else parent.left
            if isinstance(parent.op, ast.Div) and not _floating(other, ctx):
                return parent  # true division by a number or an integer tensor
            if python_float(other, ctx) and _number(other, ctx):
                return parent
            if not isinstance(parent.op, ast.Div) and _integer_made_fp32(other, ctx):
                return parent  # pos * omega, omega = 1 / 10000 ** (torch.arange(d) / d)
            if not isinstance(parent.op, _INT_OPS):
                return None
            alone = alone and _plain_number(other, ctx)
            node = parent  # shift + torch.arange(n): still integer
            continue
        if isinstance(parent, ast.Subscript) and parent.value is node:
            node = parent  # torch.arange(n)[:, None]
            continue
        if isinstance(parent, ast.Compare):
            # occ > torch.arange(k): a mask of occ's, whose .float() is the library's
            masked = masked or with_data(parent, node, ctx)
            node = parent  # (pos > 0): a bool tensor, made fp32 by a later .float()
            continue
        if isinstance(parent, ast.Call) and _float_power(node, parent, ctx):
            return parent  # torch.pow(2.0, torch.arange(n)): a float base or exponent
        if isinstance(parent, ast.Call) and floats_here(node, parent, ctx) and alone:
            return parent  # torch.log(torch.tensor([n])): fp32 (the default dtype)
        gathered = _gathered(node, parent, ctx)
        if gathered is not None:
            node = gathered  # torch.stack(torch.meshgrid(pos, pos)): still integer
            continue
        return _named_fp32(node, parent, ctx, depth, masked)


def _ranked(call: ast.AST, ctx: Context) -> bool:
    """Whether the integer factory ``call`` surely has dimensions: ``torch.tensor([n])`` of
    a list, any other factory; ``torch.log(torch.tensor(n))`` of one number (or of data the
    code does not show) may be 0-dim, which keeps half operands half."""
    if not isinstance(call, ast.Call) or ctx.is_torch_attr(call.func, "tensor") is None:
        return True
    data = call.args[0] if call.args else None
    return isinstance(data, (ast.List, ast.Tuple, ast.ListComp))


def _plain_number(expr: ast.AST, ctx: Context) -> bool:
    """A Python number (see :func:`_number`) none of whose names is bound to a torch call:
    ``-rate * torch.arange(n)`` of ``rate = torch.tensor(0.5)`` is floating already."""
    if not _number(expr, ctx):
        return False
    for n in walk(expr):
        bound = ctx.binding_before(n) if isinstance(n, ast.Name) else None
        calls = [c for c in walk(bound) if isinstance(c, ast.Call)] if bound is not None else []
        if any(dotted(c.func).startswith("torch.") for c in calls):
            return False
    return True


def _integer_made_fp32(expr: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """``omega`` bound to ``torch.arange(d) / d`` (or a power, product or slice of one): an
    fp32 table made from an integer factory by a true division or a float."""
    if depth > 3:
        return False
    if isinstance(expr, ast.Name):
        bound = ctx.binding_before(expr)
        return bound is not None and _integer_made_fp32(bound, ctx, depth + 1)
    if isinstance(expr, ast.Subscript):
        return _integer_made_fp32(expr.value, ctx, depth)
    if isinstance(expr, ast.UnaryOp):
        return _integer_made_fp32(expr.operand, ctx, depth)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Div) and any(
            integer_tensor(e, ctx) for e in (expr.left, expr.right)
        ):
            return True
        return any(_integer_made_fp32(e, ctx, depth + 1) for e in (expr.left, expr.right))
    return False


def _float_power(node: ast.AST, call: ast.Call, ctx: Context) -> bool:
    """``torch.pow(2.0, t)`` or ``torch.pow(t, 0.5)`` of an integer ``t``: fp32."""
    if ctx.is_torch_attr(call.func, "pow", "float_power") is None or node not in call.args:
        return False
    others = [a for a in call.args if a is not node]
    return any(python_float(o, ctx) and _number(o, ctx) for o in others)


_GATHERS = words("stack cat concat meshgrid")


def _gathered(node: ast.AST, parent: ast.AST | None, ctx: Context) -> ast.AST | None:
    """The call that gathers integer ``node`` with others like it: ``torch.stack([a, b])``,
    ``torch.meshgrid(pos, pos)``, einops ``rearrange(pos, "c i j -> (i j) c")``."""
    if isinstance(parent, (ast.List, ast.Tuple)):
        node, parent = parent, ctx.parents.get(id(parent))
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult) and parent.left is node:
        node, parent = parent, ctx.parents.get(id(parent))  # torch.cat([pos] * w): pos repeated
    if not isinstance(parent, ast.Call) or node not in parent.args:
        return None
    name = dotted(parent.func)
    if name in ctx.imports.einops and name.rsplit(".", 1)[-1] in ("rearrange", "repeat"):
        return parent if parent.args[0] is node else None
    if ctx.is_torch_attr(parent.func, *_GATHERS) is None:
        return None
    pieces = [
        e for a in parent.args for e in (a.elts if isinstance(a, ast.List | ast.Tuple) else [a])
    ]
    return parent if not any(_floating(e, ctx) for e in pieces) else None


def _casts(call: ast.Call) -> bool:
    """``.to(size)``: a cast to another tensor's dtype (``.to(device)`` is not one)."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr in ("to", "type")):
        return False
    for arg in (*call.args, *(k.value for k in call.keywords if k.arg == "dtype")):
        text = dotted(arg)
        device = "device" in text.lower() or isinstance(arg, ast.Constant)
        if not device:
            return True
    return False


def _floating(expr: ast.AST, ctx: Context) -> bool:
    """A floating tensor of any dtype: the model's, or one a floating factory made
    (``keypoints = torch.zeros(...)``, then ``keypoints / torch.tensor([w, h])`` has
    keypoints' dtype, whatever the integer tensor's)."""
    if value_of(expr, ctx.at(expr)) is not None:
        return True
    bound = ctx.binding_before(expr) if isinstance(expr, ast.Name) else None
    return bound is not None and ctx.is_torch_attr(_base(bound), *_FLOAT_MAKERS) is not None


def _base(expr: ast.AST) -> ast.AST:
    """The call at the start of a chain: ``torch.zeros(n).to(device)`` -> ``torch.zeros``."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if isinstance(expr.func.value, ast.Call):
            expr = expr.func.value
        else:
            return expr.func
    return expr.func if isinstance(expr, ast.Call) else expr


_FLOAT_MAKERS = ("zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace")


def _number(expr: ast.AST, ctx: Context) -> bool:
    """Whether ``expr`` is a Python number, not a tensor: arithmetic of literals, names that
    are no floating tensor, ``x.shape[i]``, and calls of ``math`` or a builtin."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.BinOp):
            stack += [e.left, e.right]
        elif isinstance(e, ast.UnaryOp):
            stack.append(e.operand)
        elif isinstance(e, ast.Subscript):
            if not (isinstance(e.value, ast.Attribute) and e.value.attr == "shape"):
                return False  # a slice of a tensor
        elif isinstance(e, ast.Call):
            name = dotted(e.func)
            if not (name.startswith("math.") or name in _BUILTIN_NUMBERS | ctx.imports.math):
                return False
        elif isinstance(e, (ast.Name, ast.Attribute)):
            if value_of(e, ctx.at(e)) is not None:
                return False
        elif not isinstance(e, ast.Constant):
            return False
    return True


_BUILTIN_NUMBERS = words("float int len round abs min max pow")
_INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_MAX_NAMED = 3  # names an integer tensor is followed through before it turns fp32


def _named_fp32(
    node: ast.AST, stmt: ast.AST | None, ctx: Context, depth: int, masked: bool
) -> ast.AST | None:
    """``pos = <integer tensor>``: the first later use of ``pos`` that makes it fp32."""
    if not isinstance(stmt, ast.Assign) or stmt.value is not node or depth >= _MAX_NAMED:
        return None
    if len(stmt.targets) != 1:
        return None
    target = stmt.targets[0]
    # ys, xs = torch.meshgrid(pos, pos): each piece is integer too
    pieces = target.elts if isinstance(target, ast.Tuple) and _gathered_call(node) else [target]
    for name in pieces:
        if not isinstance(name, ast.Name):
            continue
        for use in ctx.uses_after(name.id, stmt):
            made = _fp32_from_integer(use, ctx, depth + 1, masked)
            if made is not None:
                return made
    return None


def _gathered_call(node: ast.AST) -> bool:
    """``torch.meshgrid(...)`` or ``torch.unbind(...)``: a call that returns integer pieces of
    integer inputs."""
    name = dotted(node.func) if isinstance(node, ast.Call) else ""
    return name.rsplit(".", 1)[-1] in ("meshgrid", "unbind")


_INT_KEEPS = words(
    "view reshape unsqueeze squeeze expand expand_as repeat flatten transpose permute "
    "contiguous to t clone"
)


def _keeps_host(call: ast.Call) -> bool:
    """``pin_memory=True`` or ``device="cpu"``: a host tensor on purpose; a fix that
    inherits an activation's device would move it."""
    for k in call.keywords:
        if k.arg == "pin_memory":
            return True
        if k.arg == "device" and "cpu" in ast.dump(k.value):
            return True
    return False


def _zero_dim(call: ast.Call, ctx: Context) -> bool:
    """``torch.tensor(n)`` of one number: a 0-dim tensor, which no layer's weights take."""
    return zero_dim_factory("tensor", call, ctx.facts.float_lists, ctx.function, ctx.parents)


def check_factory(node: ast.AST, ctx: Context) -> None:
    if not isinstance(node, ast.Call):
        return
    kind = ctx.is_torch_attr(node.func, *ops.FACTORY_OPS)
    if kind is None:
        return
    keywords = {k.arg for k in node.keywords}
    if "dtype" in keywords or None in keywords:  # dtype given, or **kwargs may hold it
        return
    call = f"{dotted(node.func)}(...)"
    if kind == "tensor" and copies_tensor(node, ctx):
        return  # torch.tensor(feats) of a half tensor every caller passes: a copy, half
    if not _makes_float(kind, node, ctx):
        made = _fp32_from_integer(node, ctx)
        if made is not None:
            message = (
                f"`{call}` is an integer tensor made fp32 here (true division, a float "
                "operand or function, an upcast), in a half model too; cast it with "
                "`.to(x.dtype)`"
            )
            ctx.report(node, "HP101", message, None, made=made)
        elif kind == "tensor" and not _zero_dim(node, ctx) and _any_dtype(node, ctx):
            ctx.unsure.add(id(node))  # reported only where a layer's weights take it
            message = (
                f"`{call}` of data of another dtype than the model's meets a layer's half "
                "weights (floats make fp32, in a half model too); cast it with `.to(x.dtype)`"
            )
            ctx.report(node, "HP101", message, None, made=node)
        return
    found = template_for(node, ctx)
    if found is None:
        message = f"`{call}` without dtype makes fp32 in a half model; pass the dtype of a "
        ctx.report(node, "HP101", message + "floating tensor in scope", None, made=node)
        return
    fix, hint = _factory_fix(node, kind, keywords, found.text, not found.known, ctx)
    if _keeps_host(node):
        fix = None
    message = f"`{call}` without dtype makes fp32 in a half model; {hint}"
    ctx.report(node, "HP101", message, fix, made=node)


def _factory_fix(
    node: ast.Call, kind: str, keywords: set[str | None], template: str, unsafe: bool, ctx: Context
) -> tuple[Fix | None, str]:
    """The rewrite of a factory call to inherit ``template``'s dtype, and its hint."""
    func = node.func
    starred = any(isinstance(a, ast.Starred) for a in node.args)
    if kind in _NEW and keywords <= _NEW_KWARGS and not (kind in ("full", "tensor") and starred):
        new = f"{template}.{_NEW[kind]}"
        return Fix(METHOD, *span(func, ctx), new, unsafe=unsafe), f"use `{new}(...)`"
    hint = f"pass `dtype={template}.dtype`"
    if kind in _ADD_DTYPE and keywords <= _ADD_KWARGS and not _lone_generator(node):
        arguments: list[ast.expr | ast.keyword] = [*node.args, *node.keywords]
        last = max(arguments, key=_end, default=None)
        after = span(last, ctx)[1] if last is not None else None
        fix = Fix(
            KWARG, *span(node, ctx), f"{template}.dtype", name="dtype", after=after, unsafe=unsafe
        )
        return fix, hint
    return None, hint
