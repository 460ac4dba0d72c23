"""Data-pipeline transforms that are ``nn.Module`` classes: never part of a half model.

torchvision-style transforms subclass ``nn.Module`` (``T.RandomResizedCrop`` does) and run
in a dataset or a collate function on images the data loader hands out; the tensors they
make (a crop's location grid, a flip's coin) are data-loader outputs, like any input batch.
Converting a model to half never reaches them, so a factory in their ``forward`` is no leak.

A class of the file is such a transform when the code shows all of:

- its ``forward`` takes an image, not a tensor: the first input after ``self`` is annotated
  with a type imported from PIL or NumPy's ``ndarray`` (every member of a union), or the
  class derives from a torchvision transform (``T.RandomResizedCrop``, directly or through
  classes of the file) and the input is not annotated as anything else; or a class of
  ``torch.utils.data`` (a ``Dataset``, a ``Sampler``) or a function handed on as
  ``collate_fn=`` makes an instance of it (whatever its input);
- it holds nothing that converting a model changes: no floating parameter or buffer, and
  every ``self.X = C(...)`` is a plain Python value or an instance of another such transform
  of the file;
- no other module class of the file, nor of another file of its package (a class with a
  ``forward`` that calls the class), holds it as a submodule.

Decided by the values its ``forward`` receives and holds, not by its name or its module's.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

from halfprec.leaks.lint.classes import ClassFacts
from halfprec.readfile import read_regular

__all__ = ["held_in_package", "image_modules", "names_of", "pipeline_classes"]

Function = ast.FunctionDef | ast.AsyncFunctionDef
# calls whose result is a plain Python value, never a module or a tensor
_PLAIN_CALLS = frozenset(
    {"int", "float", "bool", "str", "tuple", "list", "dict", "set", "len", "max", "min", "round"}
)


_UNIONS = frozenset({"Union", "Optional"})


def image_modules(tree: ast.Module) -> tuple[frozenset[str], frozenset[str]]:
    """Local names bound to PIL (or one of its modules or classes) and to NumPy's
    ``ndarray``: ``(pil, ndarray)``, where ``pil`` holds ``PIL``/``Image`` and ``ndarray``
    holds ``np.ndarray``-style dotted spellings too."""
    pil: set[str] = set()
    ndarray: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root == "PIL":
                    pil.add(alias.asname or root)
                elif alias.name == "numpy":
                    ndarray.add(f"{alias.asname or 'numpy'}.ndarray")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            if root == "PIL":
                pil.update(a.asname or a.name for a in node.names)
            elif node.module == "numpy":
                ndarray.update(a.asname or a.name for a in node.names if a.name == "ndarray")
    return frozenset(pil), frozenset(ndarray)


def _is_image_type(node: ast.AST, pil: frozenset[str], ndarray: frozenset[str]) -> bool:
    """Whether annotation ``node`` names only PIL images or NumPy arrays (or None)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_image_type(node.left, pil, ndarray) and _is_image_type(node.right, pil, ndarray)
    if isinstance(node, ast.Constant) and node.value is None:
        return True  # None in a union or an Optional: still no tensor
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] in _UNIONS:
        members = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return all(_is_image_type(m, pil, ndarray) for m in members)
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return False
    name = ast.unparse(node)
    return name.split(".")[0] in pil or name in ndarray


def names_of(tree: ast.Module, package: str) -> frozenset[str]:
    """Local names bound to ``package`` (``torchvision.transforms``, ``torch.utils.data``),
    a module under it or a class of it (``T``, ``v2``, ``RandomCrop``, ``Dataset``), and
    ``package`` itself once its top-level package is imported."""
    parent, leaf = package.rsplit(".", 1)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package) and alias.asname:
                    names.add(alias.asname)
                elif alias.name.split(".")[0] == package.split(".")[0]:
                    names.add(package)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.startswith(package):
                names.update(a.asname or a.name for a in node.names)
            elif node.module == parent:
                names.update(a.asname or a.name for a in node.names if a.name == leaf)
    return frozenset(names)


def _spelled(node: ast.expr) -> str:
    """``a.b.C`` for a chain of names and attributes; ``""`` for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    inner = _spelled(node.value) if isinstance(node, ast.Attribute) else ""
    return f"{inner}.{node.attr}" if inner and isinstance(node, ast.Attribute) else ""


def _derived(classes: dict[str, ast.ClassDef], names: frozenset[str]) -> set[str]:
    """The classes that derive from a class one of ``names`` spells (a local name, or the
    dotted module it is an attribute of), directly or through classes of the file."""
    found: set[str] = set()
    changed = bool(names)
    while changed:
        changed = False
        for name, cls in classes.items():
            if name in found:
                continue
            for base in cls.bases:
                spelled = _spelled(base)
                root = spelled.split(".")[0]
                if root in names or spelled in found or spelled.rsplit(".", 1)[0] in names:
                    found.add(name)
                    changed = True
                    break
    return found


def _made_in_data_code(
    tree: ast.Module, classes: dict[str, ast.ClassDef], candidates: set[str], with_collate: bool
) -> set[str]:
    """The ``candidates`` that a class deriving from ``torch.utils.data`` (a dataset, a
    sampler) or a function handed on as ``collate_fn=`` instantiates; ``with_collate``:
    whether the file's text has ``collate_fn`` (the whole tree is walked only then)."""
    data_classes = _derived(classes, names_of(tree, "torch.utils.data"))
    collate = (
        {
            k.value.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            for k in node.keywords
            if k.arg == "collate_fn" and isinstance(k.value, ast.Name)
        }
        if with_collate
        else set()
    )
    scopes: list[ast.AST] = [classes[name] for name in data_classes]
    scopes += [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in collate
    ]
    return {
        node.func.id
        for scope in scopes
        for node in ast.walk(scope)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in candidates
    }


def _takes_an_image(
    fn: Function, pil: frozenset[str], ndarray: frozenset[str], a_transform: bool
) -> bool:
    """Whether ``fn``'s first input after ``self`` is annotated as an image; for a subclass
    of a torchvision transform (which takes an image), whether it is not annotated as
    something else."""
    inputs = [*fn.args.posonlyargs, *fn.args.args][1:]
    if not inputs:
        return False
    annotation = inputs[0].annotation
    if annotation is None:
        return a_transform
    return bool(pil or ndarray) and _is_image_type(annotation, pil, ndarray)


def _holds_only(facts: ClassFacts, allowed: set[str]) -> bool:
    """Whether every ``self.X = C(...)`` of the class is a plain value or a class in
    ``allowed``, and it has no floating parameter or buffer."""
    if facts.tensors:
        return False
    named = dict(facts.module_classes)
    for attr, called in facts.layers:
        if called in _PLAIN_CALLS:
            continue
        if named.get(attr) not in allowed:
            return False
    return True


def pipeline_classes(
    tree: ast.Module,
    facts: dict[str, ClassFacts],
    forwards: dict[str, Function],
    classes: dict[str, ast.ClassDef],
    with_collate: bool = False,
    held: Callable[[str], bool] | None = None,
) -> frozenset[str]:
    """The data-pipeline transforms among the file's module classes (see the module
    docstring): ``facts`` and ``forwards`` are keyed by class name, ``classes`` holds every
    class of the file; ``with_collate``: whether its text has ``collate_fn``; ``held``:
    whether a module class of another file holds the named class (:func:`held_in_package`)."""
    pil, ndarray = image_modules(tree)
    derived = _derived(classes, names_of(tree, "torchvision.transforms"))
    found = {
        name for name, fn in forwards.items() if _takes_an_image(fn, pil, ndarray, name in derived)
    }
    found |= _made_in_data_code(tree, classes, set(forwards), with_collate)
    changed = True
    while changed:  # drop a class that holds anything else, until none is dropped
        kept = {name for name in found if _holds_only(facts[name], found)}
        changed = kept != found
        found = kept
    holders = {
        called for name, f in facts.items() if name not in found for _, called in f.module_classes
    }
    found -= holders
    return frozenset(n for n in found if held is None or not held(n))


_MAX_FILES = 4000  # a package with more files is not searched: its transforms stay linted
_MAX_BYTES = 2 * 2**20
_held: dict[tuple[str, str], bool] = {}


def held_in_package(path: str, name: str) -> bool:
    """Whether a module class (a class with ``forward``) of another file of the package that
    holds ``path`` calls ``name(...)``: holds an instance of it. True when the package cannot
    be searched, so a transform of such a file stays linted; False for a source linted as a
    string. The answer is kept for the process."""
    if path.startswith("<"):
        return False
    file = Path(path).resolve()
    root = file.parent
    for _ in range(8):  # up to the top folder that is still a package
        if not (root.parent / "__init__.py").is_file():
            break
        root = root.parent
    key = (str(root), name)
    if key not in _held:
        _held[key] = _search(root, file, name)
    return _held[key]


def _search(root: Path, file: Path, name: str) -> bool:
    called = re.compile(rf"\b{re.escape(name)}\s*\(")
    files = [p for p in root.rglob("*.py") if p != file]
    if len(files) > _MAX_FILES:
        return True
    for other in files:
        try:
            text = read_regular(other, limit=_MAX_BYTES).decode("utf-8", errors="replace")
        except (OSError, ValueError):
            continue
        if called.search(text) and _a_module_calls(text, name):
            return True
    return False


def _a_module_calls(text: str, name: str) -> bool:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return True  # unreadable: assume it may hold one
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or not any(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "forward"
            for n in cls.body
        ):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == name:
                return True
    return False
