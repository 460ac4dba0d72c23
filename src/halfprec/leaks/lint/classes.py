"""What a module class's own code says about its attributes, read from every ``self.X = ...``
and ``self.register_buffer(...)``/``register_parameter(...)`` in the class (``__init__``
above all) and in its same-file base classes.

- ``tensors``: floating parameters and buffers (``self.w = nn.Parameter(torch.randn(4))``,
  ``self.register_buffer("inv_freq", 1.0 / base ** ...)``): ``.to()`` and ``convert`` give
  them the model's dtype, so they are templates whose dtype is known.
- ``passthrough``: attributes that hold a function, not a module (``ACT2FN[...]``,
  ``F.gelu``, ``nn.Identity()``, a lambda): ``self.act(x)`` is floating when ``x`` is. An
  attribute that another branch makes a module (``nn.LayerNorm(d) if norm else
  nn.Identity()`` spelled as an ``if``) is a module: its output is floating.
- ``methods``: the class's own method names; ``self.helper(...)`` is a method call, every
  other ``self.X(...)`` a submodule call, whose output is floating.
- ``attributes``: every ``self.X = ...`` outside ``forward``: ``self.X(...)`` of a name
  not among them is inherited from another file (``self.invert_attention_mask(m)``), which
  the lint cannot see into.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from halfprec.leaks.lint.nodes import parameters, walk

__all__ = ["ClassFacts", "class_facts", "floating_init", "NO_FACTS"]

Function = ast.FunctionDef | ast.AsyncFunctionDef

_FLOAT_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace", "randn_like"}
)
_NON_FLOAT_DTYPES = frozenset(
    {"long", "int", "int64", "int32", "int16", "int8", "uint8", "bool", "short", "half"}
    | {"float16", "bfloat16", "double", "float64"}
)
_PASSTHROUGH_CALLS = frozenset({"Identity", "get_activation", "partial"})


@dataclass(frozen=True)
class ClassFacts:
    """See the module docstring."""

    methods: frozenset[str] = frozenset()
    tensors: frozenset[str] = frozenset()
    passthrough: frozenset[str] = frozenset()
    attributes: frozenset[str] = frozenset()
    # self.X = Name(...) or nn.ModuleList([Name(...) ...]): (X, Name)
    module_classes: tuple[tuple[str, str], ...] = ()
    layers: tuple[tuple[str, str], ...] = ()  # self.X = nn.Name(...) or Name(...): (X, Name)
    # self.X = nn.ModuleList([nn.Linear(...), ...]) or built by append: (X, ("Linear", ...))
    elements: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # self.X = loss_fn (an __init__ parameter defaulting to norm_loss) or F.mse_loss: (X, name)
    callables: tuple[tuple[str, str], ...] = ()
    # self.X = weights (a parameter annotated List[float]) or [0.5, 2.0]: Python floats
    float_lists: frozenset[str] = frozenset()
    # self.X = 0.5, or a parameter annotated float or defaulting to a float: a Python float
    floats: frozenset[str] = frozenset()


NO_FACTS = ClassFacts()


def _last_name(node: ast.AST) -> str:
    while isinstance(node, (ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _dtype_is_float(call: ast.Call) -> bool:
    for k in call.keywords:
        if k.arg == "dtype":
            return _last_name(k.value) not in _NON_FLOAT_DTYPES
    return True


def floating_init(expr: ast.AST | None, local: frozenset[str] = frozenset()) -> bool:
    """Whether ``expr``, in constructor code, surely makes a floating tensor of the default
    dtype: a float factory, ``nn.Parameter``, ``.float()``, true division, arithmetic with a
    float literal, or a name in ``local`` (names bound to such values earlier)."""
    if isinstance(expr, ast.Name):
        return expr.id in local
    if isinstance(expr, ast.BinOp):
        leaves: list[ast.expr] = []
        stack: list[ast.expr] = [expr]
        while stack:  # without recursion: a long sum must not exhaust the stack
            e = stack.pop()
            if isinstance(e, ast.BinOp):
                if isinstance(e.op, ast.Div):
                    return True
                stack += [e.left, e.right]
            else:
                leaves.append(e)
        return any(
            (isinstance(p, ast.Constant) and isinstance(p.value, float)) or floating_init(p, local)
            for p in leaves
        )
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    name = _last_name(func)
    if name == "Parameter":
        inner = expr.args[0] if expr.args else None
        grads = [k.value for k in expr.keywords if k.arg == "requires_grad"]
        # requires_grad (the default) needs a floating tensor
        off = grads and isinstance(grads[0], ast.Constant) and grads[0].value is False
        return not off or floating_init(inner, local)
    if name == "float" and isinstance(func, ast.Attribute) and not expr.args:
        return True
    if name in _FLOAT_FACTORIES:
        return _dtype_is_float(expr)
    if isinstance(func, ast.Attribute) and name in ("to", "type", "clone", "detach", "reshape"):
        if any(_last_name(a) in _NON_FLOAT_DTYPES for a in expr.args):
            return False
        return floating_init(func.value, local)
    return False


def _methods(cls: ast.ClassDef) -> dict[str, Function]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _self_attr(node: ast.AST) -> str | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


def _is_passthrough(value: ast.AST) -> bool:
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Subscript):  # ACT2FN["gelu"]
        return _last_name(value.value) in ("ACT2FN", "ACT2CLS")
    if isinstance(value, ast.Attribute):  # F.gelu, torch.tanh
        return True
    return isinstance(value, ast.Call) and _last_name(value.func) in _PASSTHROUGH_CALLS


def _statements(fn: Function) -> Iterator[ast.stmt]:
    """Every statement of ``fn``, nested blocks included, in source order; expressions are
    not walked (they hold most of a tree's nodes)."""
    stack: list[ast.stmt] = list(reversed(fn.body))
    while stack:
        stmt = stack.pop()
        yield stmt
        inner: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody"):
            block = getattr(stmt, name, None)
            if isinstance(block, list) and not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                inner += block
        for handler in getattr(stmt, "handlers", ()):
            inner += handler.body
        stack += reversed(inner)


@dataclass
class _Scan:
    """What the methods of a class (and its same-file bases) say, gathered as they are read;
    see :class:`ClassFacts`."""

    tensors: set[str] = field(default_factory=set)
    passthrough: set[str] = field(default_factory=set)
    attributes: set[str] = field(default_factory=set)
    classes: dict[str, str] = field(default_factory=dict)
    layers: dict[str, str] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)  # also assigned what is not a function
    appended: dict[str, set[str]] = field(default_factory=dict)  # .append(Block(...)): Block
    held: dict[str, set[str]] = field(default_factory=dict)  # ModuleList([nn.Linear()]): Linear
    callables: dict[str, str] = field(default_factory=dict)  # self.loss_fn = loss_fn: default
    float_lists: set[str] = field(default_factory=set)  # lists of Python floats
    floats: set[str] = field(default_factory=set)  # self.X = 0.5 or a float parameter
    not_floats: set[str] = field(default_factory=set)  # also assigned something else


def _float_params(fn: Function) -> set[str]:
    """The parameters of ``fn`` annotated to hold a list of Python floats:
    ``weights: Optional[List[float]]``, ``scales: Sequence[float]``, ``w: list[float]``."""
    a = fn.args
    found = set()
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        names = {_last_name(n) for n in walk(p.annotation)} if p.annotation else set()
        if "float" in names and names & _SEQUENCES:
            found.add(p.arg)
    return found


_SEQUENCES = frozenset({"List", "list", "Sequence", "Tuple", "tuple"})


def _float_scalars(fn: Function) -> set[str]:
    """The parameters of ``fn`` annotated ``float`` (alone) or, unannotated, defaulting to
    a float literal (``eps=1e-6``)."""
    found = set()
    for p, default in parameters(fn):
        if p.annotation is not None:
            if {_last_name(n) for n in walk(p.annotation)} - {""} == {"float"}:
                found.add(p.arg)
        elif default is not None and _float_literal(default):
            found.add(p.arg)
    return found


def _float_literal(value: ast.expr) -> bool:
    """``0.5``, ``-1e-6``: a float written in the source."""
    while isinstance(value, ast.UnaryOp):
        value = value.operand
    return isinstance(value, ast.Constant) and type(value.value) is float


def _scan_function(fn: Function, scan: _Scan) -> None:
    local: set[str] = set()
    defaults = _defaults(fn)
    a = fn.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    lists: dict[str, set[str]] = {}  # blocks = [...]; blocks.append(nn.Linear(...)): layers held
    float_lists = _float_params(fn)
    floats = _float_scalars(fn)
    built = _built_defaults(fn)
    made: dict[str, ast.expr] = {}  # local names and the value each was last bound to
    for node in map(_unannotated, _statements(fn)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            registered = _registered(node.value, frozenset(local))
            if registered:
                scan.tensors.add(registered)
            _appended(node.value, scan, lists, made)
        elif isinstance(node, ast.Assign):  # self.net = net = Net(...): every target
            for target in node.targets:
                if isinstance(target, ast.Name) and floating_init(node.value, frozenset(local)):
                    local.add(target.id)
                if isinstance(target, ast.Name) and isinstance(
                    node.value, (ast.List, ast.ListComp)
                ):
                    lists[target.id] = set(_held_layers(node.value, lists))
                if isinstance(target, ast.Name):  # att = Block(...); self.blocks.append(att)
                    made[target.id] = node.value
                attr = _self_attr(target)
                if attr is None:
                    continue
                scan.attributes.add(attr)
                if (
                    isinstance(node.value, ast.Name) and node.value.id in float_lists
                ) or _float_list(node.value):
                    scan.float_lists.add(attr)
                one = isinstance(node.value, ast.Name) and node.value.id in floats
                (scan.floats if one or _float_literal(node.value) else scan.not_floats).add(attr)
                for value in _alternatives(node.value):
                    if isinstance(value, ast.Name) and value.id in built:
                        value = built[value.id]  # schedule=LinearSchedule(): that module
                    if isinstance(value, ast.Call):
                        scan.held.setdefault(attr, set()).update(_held_layers(value, lists))
                    _attribute(attr, value, local, scan)
                    function = _function_name(value, defaults, params)
                    function = function or (
                        _dotted(value) if isinstance(value, ast.Attribute) else ""
                    )
                    if function:  # several functions (a schedule chosen by name): none of them
                        kept = scan.callables.setdefault(attr, function)
                        scan.callables[attr] = function if kept == function else "?"


def _built_defaults(fn: Function) -> dict[str, ast.Call]:
    """The parameters of ``fn`` defaulting to an object built by a class of a plain name
    (``schedule: Schedule = LinearSchedule()``): ``self.schedule = schedule`` holds it
    where the caller passes none."""
    return {
        p.arg: d
        for p, d in parameters(fn)
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id[:1].isupper()
    }


def _unannotated(node: ast.stmt) -> ast.stmt:
    """``self.blocks: List[Block] = nn.ModuleList()`` binds as ``self.blocks = ...`` does."""
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)
    return node


def _float_list(value: ast.expr) -> bool:
    """``[0.5, 2.0]`` or ``(1.0, 1.0)``: a literal list or tuple of Python floats."""
    elts = value.elts if isinstance(value, (ast.List, ast.Tuple)) else []
    return any(isinstance(e, ast.Constant) and isinstance(e.value, float) for e in elts)


def _function_name(value: ast.expr, defaults: dict[str, str], params: set[str]) -> str:
    """``self.f = loss_fn`` (a parameter defaulting to a function: that function) or
    ``self.f = alpha_cosine_log_snr`` (a name of the module, not a parameter)."""
    if not isinstance(value, ast.Name):
        return ""
    return defaults.get(value.id, "") if value.id in params else value.id


def _defaults(fn: Function) -> dict[str, str]:
    """The parameters of ``fn`` whose default names a function: ``loss_fn=norm_loss``."""
    return {p.arg: _dotted(d) for p, d in parameters(fn) if d is not None and _dotted(d)}


def _dotted(node: ast.AST) -> str:
    """``F.mse_loss`` or ``norm_loss``; ``""`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _alternatives(value: ast.expr) -> list[ast.expr]:
    """``nn.Linear(d, d) if bias else None``, ``plan or Ramp()``: each value the attribute
    may hold, ``None`` left out (a call of it then runs only where it is a module)."""
    if isinstance(value, ast.IfExp):
        return [*_alternatives(value.body), *_alternatives(value.orelse)]
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        return [v for each in value.values for v in _alternatives(each)]  # plan or Ramp()
    return [] if isinstance(value, ast.Constant) and value.value is None else [value]


def _attribute(attr: str, value: ast.expr, local: set[str], scan: _Scan) -> None:
    """The facts one value assigned to ``self.<attr>`` gives."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        scan.classes[attr] = value.func.id
    elif isinstance(value, ast.Call) and _last_name(value.func) == "ModuleList":
        element = _element_class(value)
        if element is not None:
            scan.classes[attr] = element  # self.blocks[i](...): a Block's forward
    if isinstance(value, ast.Call) and not (attr in scan.layers and _is_passthrough(value)):
        scan.layers[attr] = _last_name(value.func)  # LayerNorm(d) if norm else Identity()
    if floating_init(value, frozenset(local)):
        scan.tensors.add(attr)
    elif _is_passthrough(value):
        scan.passthrough.add(attr)
    elif isinstance(value, ast.Call):
        scan.modules.add(attr)


_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential"})


def _held_layers(value: ast.expr, lists: dict[str, set[str]]) -> list[str]:
    """The layers a container holds: ``nn.ModuleList([nn.Linear(...), nn.SiLU()])``,
    ``nn.ModuleDict({"a": nn.Linear(...)})``, ``[nn.Sequential(...) for _ in range(n)]``,
    ``nn.ModuleList(blocks)`` or ``nn.Sequential(*blocks)`` of a local list built here."""
    items: list[ast.expr] = []
    if isinstance(value, ast.Call):
        if _last_name(value.func) not in _CONTAINERS:
            return []
        items = list(value.args)
    elif isinstance(value, ast.List):
        return [n for e in value.elts for n in [_called(e), *_held_layers(e, lists)]]
    elif isinstance(value, ast.ListComp):
        return [_called(value.elt), *_held_layers(value.elt, lists)]
    names: list[str] = []
    for item in items:
        item = item.value if isinstance(item, ast.Starred) else item
        if isinstance(item, ast.Name):
            names += lists.get(item.id, ())
        elif isinstance(item, (ast.List, ast.Tuple)):
            names += [n for e in item.elts for n in [_called(e), *_held_layers(e, lists)]]
        elif isinstance(item, ast.Dict):
            names += [n for e in item.values if e for n in [_called(e), *_held_layers(e, lists)]]
        elif isinstance(item, (ast.ListComp, ast.GeneratorExp)):
            names += [_called(item.elt), *_held_layers(item.elt, lists)]
        elif isinstance(item, ast.DictComp):
            names += [_called(item.value), *_held_layers(item.value, lists)]
        else:
            names += [_called(item), *_held_layers(item, lists)]
    return [n for n in names if n]


def _called(node: ast.expr) -> str:
    """``nn.Linear(d, d)``: ``"Linear"``; anything but a call: ``""``."""
    return _last_name(node.func) if isinstance(node, ast.Call) else ""


def _appended(
    call: ast.Call, scan: _Scan, lists: dict[str, set[str]], made: dict[str, ast.expr]
) -> None:
    """``self.blocks.append(Block(...))``: the classes a ``ModuleList`` built by appending
    holds (``""`` for an item that is not a class called by name), and in ``held`` the
    layers (``nn.Linear(...)``: ``"Linear"``); ``blocks.append(...)`` of a local list too,
    and an item named by a local bound to the call (``att = Block(...)``)."""
    func = call.func
    if _setattr(call, scan):
        return
    if not (isinstance(func, ast.Attribute) and len(call.args) == 1):
        return
    item = call.args[0]
    if isinstance(item, ast.Name) and item.id in made:
        item = made[item.id]
    if func.attr == "extend" and isinstance(item, (ast.List, ast.ListComp)):
        held = set(_held_layers(item, lists))  # self.blocks.extend([nn.Linear(...), ...])
        if isinstance(func.value, ast.Name) and func.value.id in lists:
            lists[func.value.id] |= held
        extended = _self_attr(func.value)
        if extended is not None:
            scan.held.setdefault(extended, set()).update(held)
        return
    if func.attr != "append":
        return
    if isinstance(func.value, ast.Name) and func.value.id in lists:
        lists[func.value.id].add(_called(item))
    attr = _self_attr(func.value)
    if attr is None:
        return
    named = ""
    if isinstance(item, ast.Call) and isinstance(item.func, ast.Name):
        named = item.func.id
    scan.appended.setdefault(attr, set()).add(named)
    scan.held.setdefault(attr, set()).add(_called(item))


def _setattr(call: ast.Call, scan: _Scan) -> bool:
    """``setattr(self, f"block{i}", nn.Linear(...))``: an attribute named by its constant
    head (``block``, which ``getattr(self, f"block{i}")`` matches) holding that layer."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "setattr"):
        return False
    if len(call.args) != 3 or _dotted(call.args[0]) != "self":
        return True
    key, value = call.args[1], call.args[2]
    head = key.values[0] if isinstance(key, ast.JoinedStr) and key.values else key
    if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value:
        scan.attributes.add(head.value)
        if isinstance(value, ast.Call):
            scan.layers[head.value] = _last_name(value.func)
            scan.modules.add(head.value)
    return True


def _element_class(modules: ast.Call) -> str | None:
    """``nn.ModuleList([Block(...) for _ in range(n)])``: the one class its items are made
    from, called by name (None when there are several or none)."""
    names = {
        n.func.id
        for n in walk(modules)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id[:1].isupper()
    }
    return names.pop() if len(names) == 1 else None


# torch layers whose subclasses hold floating ``weight`` and ``bias`` parameters
_WEIGHTED_BASES = frozenset(
    {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d"}
    | {"ConvTranspose3d", "Embedding", "EmbeddingBag", "LayerNorm", "GroupNorm", "RMSNorm"}
    | {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm2d"}
)


def _torch_layer_base(base: ast.expr) -> bool:
    """``nn.Linear`` or ``torch.nn.Conv2d`` as a base class (``Linear`` alone, imported
    from torch, too)."""
    if isinstance(base, ast.Name):
        return base.id in _WEIGHTED_BASES
    return (
        isinstance(base, ast.Attribute)
        and base.attr in _WEIGHTED_BASES
        and _last_name(base.value) in ("nn", "torch")
    )


def _registered(call: ast.Call, local: frozenset[str]) -> str | None:
    """The name of a floating buffer or parameter that ``call`` registers, or None."""
    if _last_name(call.func) not in ("register_buffer", "register_parameter"):
        return None
    args = call.args
    name = args[0] if args else None
    value = args[1] if len(args) > 1 else None
    value = next((k.value for k in call.keywords if k.arg in ("tensor", "param")), value)
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        return name.value if floating_init(value, local) else None
    return None


def class_facts(cls: ast.ClassDef, bases: list[ast.ClassDef]) -> ClassFacts:
    """The facts of ``cls``, with those of its same-file ``bases`` (nearest last wins)."""
    scan = _Scan()
    methods: set[str] = set()
    for klass in (*bases, cls):
        found = _methods(klass)
        methods |= set(found)
        for name, fn in found.items():
            if name != "forward":  # parameters and buffers are made in __init__ and setup
                _scan_function(fn, scan)
    for klass in (*bases, cls):
        if any(_torch_layer_base(b) for b in klass.bases):
            scan.tensors |= {"weight", "bias"}  # class Sn(nn.Linear): its own parameters
    classes, layers = scan.classes, scan.layers
    for attr, names in scan.appended.items():
        if layers.get(attr) == "ModuleList" and attr not in classes and len(names) == 1:
            element = names.pop()
            if element[:1].isupper():
                classes[attr] = element  # every item appended is a Block: its forward
    return ClassFacts(
        frozenset(methods),
        frozenset(scan.tensors),
        frozenset(scan.passthrough - scan.tensors - scan.modules),
        frozenset(scan.attributes),
        tuple(sorted(classes.items())),
        tuple(sorted(layers.items())),
        tuple(sorted((a, tuple(sorted(n for n in ns if n))) for a, ns in scan.held.items())),
        tuple(sorted(scan.callables.items())),
        frozenset(scan.float_lists),
        frozenset(scan.floats - scan.not_floats),
    )
