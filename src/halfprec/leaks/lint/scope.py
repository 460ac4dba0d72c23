"""Which code is a *forward path*: ``forward`` of ``nn.Module`` subclasses, plus the methods
(``self.helper(...)``) and same-file functions (``helper(...)``) they call, transitively,
and the methods of objects of this file's classes they call (``self.model.encode(...)``
where ``self.model = Policy(...)``; ``Tree.build(...)`` of a class of the file).

A class counts as a module when it defines ``forward`` and has a base class: every
``nn.Module`` with compute does, and a plain class with a ``forward`` method is rare.
Code outside forward paths (``__init__``, data loading) creates buffers that ``.to()``
converts, so it is never linted; nor is a data-pipeline transform's ``forward`` (an image in,
data-loader tensors out: :mod:`.pipeline`), which is marked ``pipeline``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts, class_facts
from halfprec.leaks.lint.nodes import words
from halfprec.leaks.lint.pipeline import pipeline_classes

__all__ = ["ForwardPath", "forward_paths", "Imports", "imports_of", "Program", "program_of"]

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class ForwardPath:
    """One function on a forward path: ``facts`` about its class (none for a plain
    function), and whether it is a module's ``forward`` itself, whose first positional
    input is the activation the module is called with."""

    function: Function
    facts: ClassFacts
    is_forward: bool = False
    pipeline: bool = False  # reached only from data-pipeline transforms (pipeline.py)
    # its calls as :func:`called_names` and :func:`held_calls` read them (read once here)
    called: tuple[tuple[bool, str], ...] = field(default=(), compare=False)
    held: tuple[tuple[bool, str, str], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Imports:
    """Local names bound to ``torch`` and to ``torch.nn.functional`` in one file, the
    local spellings of einops' dtype-keeping functions (``einsum``, ``einops.reduce``), and
    torch's functions imported by name (``from torch import sqrt``)."""

    torch: frozenset[str]
    functional: frozenset[str]
    einops: frozenset[str] = frozenset()
    functions: frozenset[str] = frozenset()
    math: frozenset[str] = frozenset()  # from math import log: log(n) is a Python float
    # names bound to a library of data transforms (from torchvision.transforms import v2)
    transforms: frozenset[str] = frozenset()


def imports_of(tree: ast.Module) -> Imports:
    torch_names: set[str] = set()
    functional: set[str] = set()
    einops: set[str] = set()
    functions: set[str] = set()
    math: set[str] = set()
    transforms: set[str] = set()
    for node in tree.body:
        transforms |= _transform_names(node)
        if isinstance(node, ast.ImportFrom) and node.module == "einops":
            einops.update(a.asname or a.name for a in node.names if a.name in EINOPS)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "einops":
                    einops.update(f"{alias.asname or 'einops'}.{name}" for name in EINOPS)
                elif alias.name == "torch":
                    torch_names.add(alias.asname or "torch")
                elif alias.name == "torch.nn.functional" and alias.asname:
                    functional.add(alias.asname)
                elif alias.name.startswith("torch.") and alias.asname is None:
                    torch_names.add("torch")
        elif isinstance(node, ast.ImportFrom) and node.module in ("torch.nn", "torch"):
            for alias in node.names:
                if alias.name == "functional":
                    functional.add(alias.asname or "functional")
        if isinstance(node, ast.ImportFrom) and node.module in _FUNCTION_MODULES:
            named = (a.asname or a.name for a in node.names if a.name not in _SUBMODULES)
            functions.update(n for n in named if n[:1].islower())
        if isinstance(node, ast.ImportFrom) and node.module == "math":
            math.update(a.asname or a.name for a in node.names)
    functions |= _torch_aliases(tree, torch_names)
    sets = (torch_names, functional, einops, functions, math, transforms)
    return Imports(*(frozenset(names) for names in sets))


TRANSFORM_MODULES = ("torchvision.transforms", "kornia.augmentation")


def _transform_names(node: ast.stmt) -> set[str]:
    """The names ``node`` binds to a module of data transforms or a class of one:
    ``from torchvision.transforms import v2``, ``import torchvision.transforms as T``,
    ``from kornia.augmentation import RandomAffine``."""
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module.startswith(TRANSFORM_MODULES):
            return {a.asname or a.name for a in node.names}
        parts = {f"{node.module}.{a.name}": a.asname or a.name for a in node.names}
        return {local for full, local in parts.items() if full in TRANSFORM_MODULES}
    if isinstance(node, ast.Import):  # import torchvision: torchvision.transforms.X
        roots = {a.name for a in node.names if a.name in ("torchvision", "kornia")}
        return roots | {
            a.asname for a in node.names if a.asname and a.name.startswith(TRANSFORM_MODULES)
        }
    return set()


def _torch_aliases(tree: ast.Module, torch_names: set[str]) -> set[str]:
    """``floor_div = torch.floor_divide`` or ``= partial(torch.div, rounding_mode="floor")``
    at the top of a file, also in an ``if``/``try`` there: a torch function by another name."""
    out: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.If, ast.Try)):
            todo += [*node.body, *node.orelse]
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
            continue
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(value, ast.Call) and value.args and _dotted_end(value.func) == "partial":
            value = value.args[0]
        if not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)):
            continue
        function = value.attr[:1].islower() and value.attr not in _NOT_FUNCTIONS
        if isinstance(target, ast.Name) and value.value.id in torch_names and function:
            out.add(target.id)
    return out


_FUNCTION_MODULES = frozenset({"torch", "torch.special", "torch.nn.functional", "torch.linalg"})
_SUBMODULES = frozenset(
    {"nn", "functional", "special", "linalg", "fft", "autograd", "cuda", "distributed", "utils"}
    | {"jit", "amp", "optim", "backends", "hub", "onnx", "testing", "no_grad", "inference_mode"}
)


# torch's attributes that are no function: dtypes, the device type, submodules
_NOT_FUNCTIONS = _SUBMODULES | words(
    "float half double bfloat16 float16 float32 float64 long int bool int8 int16 int32 int64 "
    "uint8 complex64 complex128 device dtype"
)


EINOPS = frozenset({"einsum", "reduce", "rearrange", "repeat"})  # output dtype: the inputs'


def _methods(cls: ast.ClassDef) -> dict[str, Function]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


# the matches of `(?<![\w.])(self\.)?([A-Za-z_]\w*)\s*\(`, found in the reversed text from
# each `(` (a literal, which `re` scans for fast): the name is the word before it, whole
_REVERSED_CALL = re.compile(r"\(\s*(\w+)")
_REVERSED_HELD = re.compile(r"\(\s*(\w+)\.(\w+)")
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_WORD_OR_DOT = re.compile(r"[\w.]")


def called_names(fn: Function, lines: list[str]) -> Iterator[tuple[bool, str]]:
    """``(True, name)`` for ``self.name(...)`` and ``(False, name)`` for ``name(...)``.

    Read from the function's text with a regex: five times faster than walking its tree,
    and a name that only looks like a call (in a string) at worst adds a function to lint.
    """
    text = "\n".join(lines[fn.lineno - 1 : fn.end_lineno or fn.lineno])
    yield from reversed(_calls_reversed(text[::-1]))


def _calls_reversed(back: str) -> list[tuple[bool, str]]:
    """:func:`called_names` of the text whose reverse is ``back``, last call first: a name
    not preceded by a word character or a dot, or by ``self.`` that is not."""
    out: list[tuple[bool, str]] = []
    size = len(back)
    for match in _REVERSED_CALL.finditer(back):
        word, end = match.group(1), match.end()
        if word[-1] not in _NAME_START:
            continue  # 2x(: a number's digits first
        if end < size and back[end] == ".":  # a.name( or self.name(
            if back.startswith(".fles", end) and not _WORD_OR_DOT.match(back, end + 5):
                out.append((True, word[::-1]))
            continue
        out.append((False, word[::-1]))
    return out


def held_calls(fn: Function, lines: list[str]) -> Iterator[tuple[bool, str, str]]:
    """``(True, x, m)`` for ``self.x.m(...)`` and ``(False, C, m)`` for ``C.m(...)``."""
    text = "\n".join(lines[fn.lineno - 1 : fn.end_lineno or fn.lineno])
    yield from reversed(_held_reversed(text[::-1]))


def _held_reversed(back: str) -> list[tuple[bool, str, str]]:
    r""":func:`held_calls` of the text whose reverse is ``back``, last call first (the
    matches of `(?<![\w.])(self\.)?([A-Za-z_]\w*)\.([A-Za-z_]\w*)\s*\(`)."""
    out: list[tuple[bool, str, str]] = []
    size = len(back)
    for match in _REVERSED_HELD.finditer(back):
        method, holder, end = match.group(1), match.group(2), match.end()
        if method[-1] not in _NAME_START or holder[-1] not in _NAME_START:
            continue
        if end < size and back[end] == ".":  # a.x.m( or self.x.m(
            if back.startswith(".fles", end) and not _WORD_OR_DOT.match(back, end + 5):
                out.append((True, holder[::-1], method[::-1]))
            continue
        out.append((False, holder[::-1], method[::-1]))
    return out


def _members(
    name: str,
    by_name: dict[str, ast.ClassDef],
    modules: dict[str, tuple[dict[str, Function], ClassFacts]],
    program: Program | None,
) -> tuple[dict[str, Function], ClassFacts] | None:
    """The methods (with its same-file bases') and facts of the class ``name``: ``modules``'
    entry for a module class, else read from ``by_name`` (the file's classes)."""
    if name in modules or name not in by_name:
        return modules.get(name)
    cls = by_name[name]
    bases = [by_name[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in by_name]
    bases = [b for b in bases if b is not cls]
    methods: dict[str, Function] = {}
    for klass in (*bases, cls):
        methods.update(_methods(klass))
    facts = class_facts(cls, bases) if program is None else program.facts_of(cls, bases)
    return methods, facts


def forward_paths(
    tree: ast.Module,
    lines: list[str],
    program: Program | None = None,
    held: Callable[[str], bool] | None = None,
) -> list[ForwardPath]:
    """Every function on a forward path of ``tree``, each once, in source order;
    ``program``: the tree's, to share its classes' facts with the rest of the file's walk;
    ``held``: whether another file's module class holds a class of this one (by name)."""
    functions = {
        n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    by_name = {c.name: c for c in classes}
    seen: dict[int, ForwardPath] = {}
    modules: dict[str, tuple[dict[str, Function], ClassFacts]] = {}

    for cls in classes:
        methods = _methods(cls)
        if "forward" not in methods or not cls.bases:
            continue
        # methods inherited from module classes of the same file are reachable via self.
        bases = [by_name[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in by_name]
        for base in bases:
            methods = {**_methods(base), **methods}
        facts = class_facts(cls, bases) if program is None else program.facts_of(cls, bases)
        modules[cls.name] = (methods, facts)
    pipeline = pipeline_classes(
        tree,
        {name: facts for name, (_, facts) in modules.items()},
        {name: methods["forward"] for name, (methods, _) in modules.items()},
        by_name,
        "collate_fn" in "\n".join(lines),  # no line end inside the name: as line by line
        held,
    )
    queue: list[tuple[Function, dict[str, Function], ClassFacts, bool]] = []
    for name, (methods, facts) in modules.items():
        piped = name in pipeline
        queue.append((methods["forward"], methods, facts, piped))
        seen[id(methods["forward"])] = ForwardPath(
            methods["forward"], facts, is_forward=True, pipeline=piped
        )
    texts: dict[int, tuple[tuple[tuple[bool, str], ...], tuple[tuple[bool, str, str], ...]]] = {}
    while queue:
        fn, methods, facts, piped = queue.pop()
        entry = seen.get(id(fn))
        if entry is None or (entry.pipeline and not piped and not entry.is_forward):
            seen[id(fn)] = ForwardPath(fn, facts, pipeline=piped)  # a model's path wins
        elif not entry.is_forward:
            continue
        if id(fn) not in texts:
            texts[id(fn)] = (tuple(called_names(fn, lines)), tuple(held_calls(fn, lines)))
        called, held_by = texts[id(fn)]
        found: list[tuple[Function, dict[str, Function], ClassFacts]] = []
        for on_self, name in called:
            callee = methods.get(name) if on_self else functions.get(name)
            if callee is not None:
                found.append((callee, methods, facts) if on_self else (callee, {}, NO_FACTS))
        module_classes = dict(facts.module_classes) if held_by else {}
        for on_self, holder, name in held_by:
            held_name = module_classes.get(holder) if on_self else holder
            held_class = _members(held_name, by_name, modules, program) if held_name else None
            if held_class is not None and name in held_class[0]:
                found.append((held_class[0][name], *held_class))
        for callee, its_methods, its_facts in found:
            known = seen.get(id(callee))
            if known is None or (known.pipeline and not piped):
                queue.append((callee, its_methods, its_facts, piped))
    paths = [
        replace(p, called=texts[id(p.function)][0], held=texts[id(p.function)][1])
        for p in seen.values()
    ]
    return sorted(paths, key=lambda p: p.function.lineno)


@dataclass(frozen=True)
class Program:
    """What one file defines, for following a tensor into a call: its functions, and each
    module class's methods (with those of its same-file bases) and facts; ``aliases``: the
    names it binds to a layer (``LinearNoBias = partial(nn.Linear, bias=False)``)."""

    functions: dict[str, Function]
    classes: dict[str, ast.ClassDef]
    aliases: dict[str, str] = field(default_factory=dict, compare=False)
    facts: dict[tuple[int, ...], ClassFacts] = field(default_factory=dict, compare=False)
    owners: dict[int, str] = field(default_factory=dict, compare=False)  # id(method) -> class

    def facts_of(self, cls: ast.ClassDef, bases: list[ast.ClassDef]) -> ClassFacts:
        """``class_facts(cls, bases)``, computed once per file: it reads only the tree."""
        key = (id(cls), *map(id, bases))
        if key not in self.facts:
            self.facts[key] = class_facts(cls, bases)
        return self.facts[key]

    def methods_of(self, name: str) -> tuple[dict[str, Function], ClassFacts] | None:
        cls = self.classes.get(name)
        if cls is None:
            return None
        bases = [
            self.classes[b.id]
            for b in cls.bases
            if isinstance(b, ast.Name) and b.id in self.classes
        ]
        bases = [b for b in bases if b is not cls]
        methods: dict[str, Function] = {}
        for klass in (*bases, cls):
            methods.update(_methods(klass))
        return methods, self.facts_of(cls, bases)

    def owner_of(self, fn: Function) -> str | None:
        """The name of the class whose method ``fn`` is (the first such class; a method
        that a later ``def`` of the same name replaces is none): indexed once per file."""
        if not self.owners:
            for name, cls in self.classes.items():
                for method in _methods(cls).values():
                    self.owners.setdefault(id(method), name)
        return self.owners.get(id(fn))


def program_of(tree: ast.Module) -> Program:
    functions = {
        n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    return Program(functions, classes, _aliases(tree))


def _aliases(tree: ast.Module) -> dict[str, str]:
    """``LinearNoBias = partial(nn.Linear, bias=False)`` or ``Dense = nn.Linear`` at the top
    of a file: the name and the last part of the class it stands for (``Linear``); for a
    dict of classes (``CELLS = {"lstm": nn.LSTMCell, "gru": nn.GRUCell}``, called as
    ``CELLS[kind](...)``) each of them, joined by ``|``."""
    found: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(value, ast.Call) and value.args and _dotted_end(value.func) == "partial":
            value = value.args[0]
        end = _dotted_end(value)
        if isinstance(value, ast.Dict) and value.values:  # CELLS = {"lstm": nn.LSTMCell, ...}
            ends = sorted({_dotted_end(v) for v in value.values})
            end = "|".join(ends) if all(e[:1].isupper() for e in ends) else ""
        if isinstance(target, ast.Name) and end[:1].isupper():
            found[target.id] = end
    for node in tree.body:
        layer = _layer_subclass(node)
        if layer and isinstance(node, ast.ClassDef):
            found.setdefault(node.name, layer)  # class Eq(nn.Linear) with no forward: a Linear
    return found


def _layer_subclass(node: ast.stmt) -> str:
    """``Linear`` of ``class EqualizedLinear(nn.Linear)`` that defines no ``forward``: it
    runs its first base's, a layer of torch's (``""`` for any other statement)."""
    if not isinstance(node, ast.ClassDef) or not node.bases or "forward" in _methods(node):
        return ""
    base = node.bases[0]
    if not (isinstance(base, ast.Attribute) and _dotted_end(base.value) in ("nn", "torch")):
        return ""
    return "" if base.attr.startswith("Module") else base.attr


def _dotted_end(node: ast.AST) -> str:
    """``Linear`` of ``nn.Linear`` or ``Linear``; ``""`` for anything but a dotted name."""
    if isinstance(node, ast.Attribute):
        return node.attr if _dotted_end(node.value) or isinstance(node.value, ast.Name) else ""
    return node.id if isinstance(node, ast.Name) else ""
