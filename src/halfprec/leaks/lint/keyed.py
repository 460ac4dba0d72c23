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
import re
from pathlib import Path

from halfprec.leaks.lint.classes import ClassFacts
from halfprec.leaks.lint.source import SourceError, decode_source
from halfprec.readfile import read_regular

_MAX_FILES = 400  # a larger tree is not searched (its keys would cost every lint)
_MAX_BYTES = 2 * 2**20
_MAX_UP = 8
_classes: dict[tuple[str, str], tuple[str, str] | None] = {}
_trees: dict[str, tuple[ast.Module, str] | None] = {}
_files: dict[str, list[Path]] = {}


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


def held_key(func: ast.AST, facts: ClassFacts) -> str | None:
    """``key`` of ``self.model.key(...)`` or ``self.model["key"](...)`` where ``self.model``
    is nothing the class shows it holds (no layer, tensor, function or method of its own):
    an object it was handed."""
    if isinstance(func, ast.Attribute):
        holder, key = func.value, func.attr
    elif isinstance(func, ast.Subscript) and isinstance(func.slice, ast.Constant):
        holder, key = func.value, str(func.slice.value)
    else:
        return None
    if not (isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name)):
        return None
    if holder.value.id != "self":
        return None
    name = holder.attr
    kinds = (facts.tensors, facts.methods, facts.float_lists)
    pairs = (facts.layers, facts.module_classes, facts.callables)
    known = any(name in k for k in kinds) or any(name in dict(p) for p in pairs)
    return None if known else key


def _search(root: Path, key: str) -> tuple[str, str] | None:
    key_root = str(root)
    if key_root not in _files:
        _files[key_root] = sorted(root.rglob("*.py"))
    files = _files[key_root]
    if len(files) > _MAX_FILES:
        return None
    stored = re.compile(rf"\b{re.escape(key)}\s*=[^=]|[\"']{re.escape(key)}[\"']\s*:")
    found: set[str] = set()
    for file in files:
        tree = _tree(file, stored)
        if tree is not None:
            found |= _stored_classes(tree, key)
    if len(found) != 1:
        return None
    name = found.pop()
    for file in files:
        tree = _tree(file, None)
        if tree is not None and _module_class(tree, name):
            return str(file), name
    return None


def _tree(file: Path, wanted: re.Pattern[str] | None) -> ast.Module | None:
    """The parsed file (once per process), or None where ``wanted`` is not in its text."""
    name = str(file)
    if name not in _trees:
        try:
            text = decode_source(read_regular(file, limit=_MAX_BYTES)).text
            _trees[name] = (ast.parse(text, filename=name), text)
        except (OSError, SourceError, SyntaxError, ValueError, RecursionError):
            _trees[name] = None
    parsed = _trees[name]
    if parsed is None:
        return None
    tree, text = parsed
    return tree if wanted is None or wanted.search(text) else None


def _stored_classes(tree: ast.Module, key: str) -> set[str]:
    """The classes instantiated into ``key=`` of a call or ``"key":`` of a dict literal in
    ``tree`` (directly, or through a name bound to ``Cls(...)`` in the same function); a
    value of another kind is ``"?"``, so the key is then undecided."""
    out: set[str] = set()
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        made = _made(scope)
        for node in ast.walk(scope):
            values: list[ast.expr] = []
            if isinstance(node, ast.Call):
                values = [k.value for k in node.keywords if k.arg == key]
            elif isinstance(node, ast.Dict):
                values = [
                    v
                    for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value == key
                ]
            for value in values:
                out.add(_class_of(value, made))
    return out


def _made(scope: ast.AST) -> dict[str, str]:
    """Names bound once in ``scope`` to ``Cls(...)``: name -> class ("?" if rebound)."""
    out: dict[str, str] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                cls = _class_of(node.value, {})
                out[target.id] = cls if target.id not in out else "?"
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
