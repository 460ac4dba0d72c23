"""Modules a model is handed in a dict: ``self.model.predictor(...)`` where ``self.model``
is a constructor argument that another file of the package builds as
``Munch(predictor=ProsodyPredictor(...), ...)`` (or ``dict(...)``, ``nn.ModuleDict({...})``,
``{"predictor": predictor}`` with ``predictor = ProsodyPredictor(...)`` before it).

The lint cannot see which object the argument is, but the package shows what is stored
under the key: where every such binding of ``predictor`` in the package is an instance of
one module class (a class with ``forward``) of the package, ``self.model.predictor(...)``
runs that class's ``forward``: a tensor handed to it is followed into it (:mod:`.reach`),
and its result is a module's output, floating like a submodule's (:mod:`.values`). A key
bound to several classes, or to anything else, decides nothing.

The package is the folder chain above the file that still holds ``__init__.py``; its files
are searched once per key (a text search first), and not at all beyond a size a package
of model code has.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.memo import on_forget, run_dict
from halfprec.leaks.lint.nodes import words
from halfprec.leaks.lint.scope import Function
from halfprec.leaks.lint.source import SourceError, decode_source
from halfprec.readfile import read_regular

_DICT_METHODS = words("keys values items get pop popitem setdefault update copy clear")
_MAX_FILES = 400  # a larger tree is not searched (its keys would cost every lint)
_MAX_BYTES = 2 * 2**20
_MAX_UP = 8
_classes = run_dict(dict[tuple[str, str], tuple[str, str] | None])
_trees = run_dict(dict[str, ast.Module | None])
_texts = run_dict(dict[str, bytes])
_decoded = run_dict(dict[str, str])
_files = run_dict(dict[str, list[Path]])


def keyed_class(path: str, key: str) -> tuple[str, str] | None:
    """The file and name of the one module class the package of ``path`` stores under
    ``key`` in a dict of modules, or None (see the module docstring)."""
    if path.startswith("<"):
        return None
    root = _package(Path(path).resolve())
    if root is None:
        return None
    memo = (str(root), key)
    if memo not in _classes:
        _classes[memo] = _search(root, key)
    return _classes[memo]


def _package(file: Path) -> Path | None:
    root = file.parent
    if not (root / "__init__.py").is_file():
        return None
    for _ in range(_MAX_UP):
        if not (root.parent / "__init__.py").is_file():
            break
        root = root.parent
    return root


def held_key(func: ast.AST, ctx: Context) -> str | None:
    """``key`` of ``self.model.key(...)`` or ``self.model["key"](...)`` where ``self.model``
    is an argument of its class's ``__init__`` kept as it is (``self.model = model``) and
    nothing the class shows it holds (no layer, tensor, function or method of its own)."""
    if isinstance(func, ast.Attribute):
        holder, key = func.value, func.attr
    elif isinstance(func, ast.Subscript) and isinstance(func.slice, ast.Constant):
        holder, key = func.value, str(func.slice.value)
    else:
        return None
    if not (isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name)):
        return None
    if holder.value.id != "self" or key in _DICT_METHODS:
        return None  # self.model.keys(): a method of the dict, no module stored under it
    name = holder.attr
    cls = owner_class(ctx)
    if cls is None or name not in handed(cls):
        return None
    facts = ctx.facts
    kinds = (facts.tensors, facts.methods, facts.float_lists)
    pairs = (facts.layers, facts.module_classes, facts.callables)
    known = any(name in k for k in kinds) or any(name in dict(p) for p in pairs)
    return None if known else key


def owner_class(ctx: Context) -> ast.ClassDef | None:
    """The class of the function ``ctx`` walks, when this file defines it."""
    calls, fn = ctx.calls, ctx.function
    if calls is None or not isinstance(fn, Function):
        return None
    owner = calls.program.owner_of(fn)
    return calls.program.classes.get(owner) if owner else None


@functools.lru_cache(maxsize=256)
def handed(cls: ast.ClassDef) -> frozenset[str]:
    """The attributes ``cls``'s ``__init__`` sets to one of its own arguments as it is."""
    init = next(
        (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )
    if init is None:
        return frozenset()
    a = init.args
    args = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)} - {"self"}
    out = set()
    for node in init.body:  # self.model = model among __init__'s own statements
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)):
            continue
        for target in node.targets:
            if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
                continue
            if target.value.id == "self" and node.value.id in args:
                out.add(target.attr)
    return frozenset(out)


def _search(root: Path, key: str) -> tuple[str, str] | None:
    key_root = str(root)
    if key_root not in _files:
        _files[key_root] = sorted(root.rglob("*.py"))
    files = _files[key_root]
    if len(files) > _MAX_FILES:
        return None
    word = re.escape(key)  # key=... (a keyword, as written) or "key": in a dict literal
    stored = re.compile(rf"(?<![\w.]){word}=(?!=)|[\"']{word}[\"']\s*:")
    found: set[str] = set()
    for file in files:
        tree = _tree(file, stored, (f"{key}=", f'"{key}"', f"'{key}'"))
        if tree is not None:
            found |= _stored_classes(tree, key)
    if len(found) != 1:
        return None
    name = found.pop()
    defined = re.compile(rf"^class\s+{re.escape(name)}\b", re.M)
    for file in files:
        tree = _tree(file, defined, (f"class {name}",))
        if tree is not None and _module_class(tree, name):
            return str(file), name
    return None


def _raw(file: Path) -> bytes:
    """The file's bytes (read once per process; empty where it cannot be read)."""
    name = str(file)
    if name not in _texts:
        try:
            _texts[name] = read_regular(file, limit=_MAX_BYTES)
        except (OSError, ValueError):
            _texts[name] = b""
    return _texts[name]


def _tree(file: Path, wanted: re.Pattern[str], spellings: tuple[str, ...]) -> ast.Module | None:
    """The parsed file (once per process) where ``wanted`` is in its text, else None."""
    raw = _raw(file)
    if not any(s.encode() in raw for s in spellings):
        return None  # a byte test first: most files never spell the key so
    name = str(file)
    if name not in _decoded:
        try:
            _decoded[name] = decode_source(raw).text
        except (SourceError, ValueError):
            _decoded[name] = ""
    text = _decoded[name]
    if not wanted.search(text):
        return None
    if name not in _trees:
        try:
            _trees[name] = ast.parse(text, filename=name)
        except (SyntaxError, ValueError, RecursionError):
            _trees[name] = None
    return _trees[name]


def _stored_classes(tree: ast.Module, key: str) -> set[str]:
    """The classes instantiated into ``key=`` of a call or ``"key":`` of a dict literal in
    ``tree`` (directly, or through a name bound to ``Cls(...)`` in the same function); a
    value of another kind is ``"?"``, so the key is then undecided."""
    return _index(tree).get(key, set())


@functools.lru_cache(maxsize=256)
def _index(tree: ast.Module) -> dict[str, set[str]]:
    """Every key of ``tree`` stored into a dict (see :func:`_stored_classes`), in one walk
    of the file; a name stands for the class every assignment of the file binds it to."""
    made: dict[str, str] = {}
    pairs: list[tuple[str, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            pairs += [(k.arg, k.value) for k in node.keywords if k.arg]
        elif isinstance(node, ast.Dict):
            pairs += [
                (k.value, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                cls = _class_of(node.value, {})
                made[target.id] = cls if made.get(target.id, cls) == cls else "?"
    out: dict[str, set[str]] = {}
    for name, value in pairs:
        out.setdefault(name, set()).add(_class_of(value, made))
    return out


def _class_of(value: ast.expr, made: dict[str, str]) -> str:
    if isinstance(value, ast.Name):
        return made.get(value.id, "?")
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Name) and func.id[:1].isupper():
            return func.id
    return "?"


def _module_class(tree: ast.Module, name: str) -> bool:
    """Whether ``tree`` defines a class ``name`` with a ``forward``."""
    return any(
        isinstance(node, ast.ClassDef)
        and node.name == name
        and any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in node.body)
        for node in tree.body
    )


on_forget(handed.cache_clear)
on_forget(_index.cache_clear)
