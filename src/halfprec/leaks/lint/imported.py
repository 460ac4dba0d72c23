"""Module classes that another file of the linted tree defines (``from .vit import
Transformer``, ``from pkg.blocks import Block``): the import is resolved to a ``.py`` file
next to the linted one, that file is parsed once per process, and :mod:`.reach` follows a
tensor into the class's ``forward`` there as it does for a class of the same file.

Only files on disk are read (a source linted as a string has no neighbours); a package's
``__init__.py`` that re-exports the name is followed one step. Files that cannot be read or
parsed, or that are larger than a source file the lint reads, are skipped.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from halfprec.leaks.lint.classes import ClassFacts
from halfprec.leaks.lint.context import Calls
from halfprec.leaks.lint.flow import calls_of
from halfprec.leaks.lint.keyed import keyed_class
from halfprec.leaks.lint.memo import on_forget, run_dict
from halfprec.leaks.lint.scope import Function, Imports, imports_of, program_of
from halfprec.leaks.lint.source import SourceError, decode_source, split_lines
from halfprec.leaks.lint.starred import star_key, through_stars, top_names
from halfprec.readfile import read_regular

Imported = dict[str, tuple[str, int, str]]  # local name -> (module, level, name there)
Found = tuple[Calls, Function, ClassFacts]
_T = TypeVar("_T")

_MAX_FILES = 128  # other files kept parsed at once (each holds its tree)
_MAX_BYTES = 2 * 2**20  # larger files are not read for this
_MAX_UP = 8
_MAX_CALLED = 16  # functions a helper calls whose text is read for a factory
_IMPORT = re.compile("import")  # a literal: re scans for it fast (a word or not)
_CALLED = re.compile(
    r"(?<![\w.])([A-Za-z_]\w*)\s*\("
)  # parent folders searched for an absolute import's package
_loaded: dict[tuple[str, int, int], tuple[Calls, Imported] | None] = {}
_origins: dict[int, Origin] = {}  # id(Calls) of a loaded file -> what walking it needs
_FOUND = run_dict(dict[tuple[str, str, int], Path | None])  # module_file, by folder


@dataclass(frozen=True)
class Origin:
    """A loaded file's path, imports and text: what walking one of its functions with the
    rules needs (see :mod:`.elsewhere`)."""

    path: str
    imports: Imports
    text: str


def imported_names(tree: ast.Module, text: str | None = None) -> Imported:
    """The names ``from <module> import <name>`` binds in a file (at its top, or in a
    function: ``__init__`` importing its layers), and ``import <pkg>.<module> as <name>``;
    the first binding of a name wins. Only statements are visited, never expressions;
    given the file's ``text`` (with ``\n`` line ends), only those whose lines hold the text
    ``import`` (an import statement's lines always do)."""
    names: Imported = {}
    starts = _import_lines(text) if text is not None and "\r" not in text else None
    stack: list[ast.stmt] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if starts is not None and not _holds_line(starts, node):
            continue
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                local = alias.asname or alias.name
                if local == "*":  # a package handing on a module's names (.starred)
                    local = star_key(node.module, node.level)
                names.setdefault(local, (node.module or "", node.level, alias.name))
            continue
        if isinstance(node, ast.Import):  # import pkg.ops as ops: the module pkg.ops
            for alias in node.names:
                parent, _, last = alias.name.rpartition(".")
                if alias.asname and parent:
                    names.setdefault(alias.asname, (parent, 0, last))
            continue
        for block in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, block, None)
            if isinstance(inner, list):
                stack.extend(reversed([n for n in inner if isinstance(n, ast.stmt)]))
        for handler in getattr(node, "handlers", ()):
            stack.extend(reversed(handler.body))
    return names


def _import_lines(text: str) -> list[int]:
    """The numbers of the lines of ``text`` that hold the text ``import``, in order."""
    found: list[int] = []
    line, pos = 1, 0
    for match in _IMPORT.finditer(text):
        line += text.count("\n", pos, match.start())
        pos = match.start()
        if not found or found[-1] != line:
            found.append(line)
    return found


def _holds_line(starts: list[int], node: ast.stmt) -> bool:
    """Whether one of the sorted line numbers ``starts`` is among ``node``'s lines."""
    at = bisect.bisect_left(starts, node.lineno)
    return at < len(starts) and starts[at] <= (node.end_lineno or node.lineno)


def module_file(path: Path, module: str, level: int) -> Path | None:
    """The file that ``from <.. module> import`` reads, seen from ``path``; None when no such
    file is next to it (a third-party package). Looked up once per folder in a run: every
    file of a package imports the same modules."""
    key = (str(path.parent), module, level)
    if key not in _FOUND:
        _FOUND[key] = _module_file(path, module, level)
    return _FOUND[key]


def _module_file(path: Path, module: str, level: int) -> Path | None:
    parts = module.split(".") if module else []
    if level:
        bases = [path.parents[level - 1]] if level <= len(path.parents) else []
    else:
        bases = list(path.parents)[:_MAX_UP]
        if not parts or parts[0] in ("torch", "einops", "numpy", "transformers"):
            return None
    for base in bases:
        package = base.joinpath(*parts, "__init__.py")
        if not parts:  # from . import x: the package's __init__.py
            if package.is_file():
                return package
            continue
        for candidate in (base.joinpath(*parts[:-1], parts[-1] + ".py"), package):
            if candidate.is_file():
                return candidate
    return None


def forward_of(path: str, imported: Imported, name: str, hops: int = 3) -> Found | None:
    """The ``forward`` of class ``name`` imported into the file at ``path``, in the walked
    calls of the file that defines it (None when that file is not found or has no such
    class)."""
    return method_of(path, imported, name, "forward", hops)


def method_of(path: str, imported: Imported, name: str, method: str, hops: int = 3) -> Found | None:
    """The method ``method`` of class ``name`` imported into the file at ``path`` (its own
    or one it inherits from a base class defined there or imported there), in the walked
    calls of the file that defines it."""
    entry = imported.get(name)
    if entry is None and hops > 0 and not path.startswith("<"):  # (.starred)
        return _via_stars(
            path, imported, name, lambda one: method_of(path, one, name, method, hops - 1)
        )
    if entry is None or hops <= 0 or path.startswith("<"):
        return None
    module, level, there = entry
    file = module_file(Path(path), module, level)
    loaded = _load(file) if file is not None else None
    if loaded is None:
        return None
    calls, names = loaded
    made = calls.program.methods_of(there)
    if made is None:  # re-exported by a package's __init__.py
        return method_of(str(file), names, there, method, hops - 1)
    methods, facts = made
    found = methods.get(method)
    if found is not None:
        return calls, found, facts
    cls = calls.program.classes[there]
    for base in cls.bases:  # class Policy(PreTrainedPolicy) of a third file
        further = (
            method_of(str(file), names, base.id, method, hops - 1)
            if isinstance(base, ast.Name)
            else None
        )
        if further is not None:
            return further
    return None


def alias_of(path: str, imported: Imported, name: str, hops: int = 3) -> str:
    """The layer that ``name``, imported into the file at ``path``, stands for where the
    file that defines it binds it to one (``LinearNoBias = partial(Linear, bias=False)``:
    ``Linear``); ``""`` when it is not such an alias."""
    entry = imported.get(name)
    if entry is None and hops > 0 and not path.startswith("<"):  # (.starred)
        return (
            _via_stars(path, imported, name, lambda one: alias_of(path, one, name, hops - 1)) or ""
        )
    if entry is None or hops <= 0 or path.startswith("<"):
        return ""
    module, level, there = entry
    file = module_file(Path(path), module, level)
    loaded = _load(file) if file is not None else None
    if loaded is None:
        return ""
    calls, names = loaded
    found = calls.program.aliases.get(there, "")
    return found or alias_of(str(file), names, there, hops - 1)


def function_of(
    path: str, imported: Imported, name: str, hops: int = 3
) -> tuple[Calls, Function] | None:
    """The function ``name`` imported into the file at ``path`` from another file of the
    linted tree (``from .utils import pad_to``, ``from ...masking_utils import
    build_mask``, ``from pkg.ops import mix``), in the walked calls of the file that defines
    it. A branch there chosen by the tensor's rank is judged by :mod:`.branches`."""
    entry = imported.get(name)
    if entry is None and hops > 0 and not path.startswith("<"):  # (.starred)
        return _via_stars(path, imported, name, lambda one: function_of(path, one, name, hops - 1))
    if entry is None or hops <= 0 or path.startswith("<"):
        return None
    module, level, there = entry
    file = module_file(Path(path), module, level)
    loaded = _load(file) if file is not None else None
    if loaded is None:
        return None
    calls, names = loaded
    fn = calls.program.functions.get(there)
    return (calls, fn) if fn is not None else function_of(str(file), names, there, hops - 1)


def module_function_of(
    path: str, imported: Imported, name: str, attr: str
) -> tuple[Calls, Function] | None:
    """The function ``attr`` of the module ``name`` imported into the file at ``path``
    from another file of the tree (``from . import ops`` ... ``ops.mix(h, t)``)."""
    entry = imported.get(name)
    if entry is None or path.startswith("<"):
        return None
    module, level, there = entry
    file = module_file(Path(path), f"{module}.{there}" if module else there, level)
    loaded = _load(file) if file is not None else None
    if loaded is None:
        return None
    calls = loaded[0]
    fn = calls.program.functions.get(attr)
    return (calls, fn) if fn is not None else None


def keyed_forward(path: str, key: str) -> Found | None:
    """The ``forward`` of the one module class the package of ``path`` stores under ``key``
    in a dict of modules (see :mod:`.keyed`), in the walked calls of its file."""
    found = keyed_class(path, key)
    loaded = _load(Path(found[0])) if found is not None else None
    if found is None or loaded is None:
        return None
    made = loaded[0].program.methods_of(found[1])
    if made is None or "forward" not in made[0]:
        return None
    return loaded[0], made[0]["forward"], made[1]


def _load(file: Path) -> tuple[Calls, Imported] | None:
    try:
        stat = file.stat()
    except OSError:
        return None
    key = (str(file.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _loaded:
        return _loaded[key]
    if len(_loaded) >= _MAX_FILES:
        _drop_loaded()
    _loaded[key] = None  # an import cycle ends here
    try:
        text = decode_source(read_regular(file, limit=_MAX_BYTES)).text
        tree = ast.parse(text, filename=str(file))
    except (OSError, SourceError, SyntaxError, ValueError, RecursionError):
        return None
    imports, names = imports_of(tree), imported_names(tree, text)
    calls = calls_of(program_of(tree), imports, split_lines(text))
    calls.other = lambda cls: forward_of(str(file), names, cls)
    calls.alias = lambda name: alias_of(str(file), names, name)
    calls.function = lambda name: function_of(str(file), names, name)
    calls.method = lambda cls, name: method_of(str(file), names, cls, name)
    calls.module = lambda name, attr: module_function_of(str(file), names, name, attr)
    calls.keyed = lambda name: keyed_forward(str(file), name)
    _loaded[key] = (calls, names)
    _origins[id(calls)] = Origin(str(file), imports, text)
    return _loaded[key]


def defines_maker(path: str, imported: Imported, name: str, maker: re.Pattern[str]) -> bool:
    """Whether the file that ``name`` is imported from into the file at ``path`` defines a
    function ``name`` at its top whose text ``maker`` matches: read from the text (cached),
    so that a file whose helpers make no tensor is never parsed for them."""
    entry = imported.get(name)
    if entry is None or path.startswith("<"):
        return False
    module, level, there = entry
    file = module_file(Path(path), module, level)
    if file is None:
        return False
    text = _function_text(file, there)
    if maker.search(text):
        return True
    called = set(_CALLED.findall(text)) - {there}  # the functions of its file it calls
    return any(maker.search(_function_text(file, name)) for name in sorted(called)[:_MAX_CALLED])


@functools.lru_cache(maxsize=1024)
def _function_text(file: Path, name: str) -> str:
    """The text of the top-level ``def name`` of ``file`` (to the next unindented line)."""
    pattern = rf"^def {re.escape(name)}\b.*?(?=^[^\s)\]]|\Z)"  # a signature's `)` aside
    found = re.search(pattern, _text(file), re.M | re.S)
    return found.group() if found is not None else ""


def module_defines_maker(
    path: str, imported: Imported, name: str, attr: str, maker: re.Pattern[str]
) -> bool:
    """:func:`defines_maker` for ``attr`` of the module ``name`` (``U.grid``)."""
    entry = imported.get(name)
    if entry is None:
        return False
    module, level, there = entry
    return defines_maker(
        path, {attr: (f"{module}.{there}" if module else there, level, attr)}, attr, maker
    )


def _via_stars(
    path: str, imported: Imported, name: str, find: Callable[[Imported], _T | None]
) -> _T | None:
    """``find`` of ``name`` in the module of the tree that the file at ``path``
    star-imports it from (see :mod:`.starred`)."""
    names = functools.partial(_star_names, Path(path).parent)
    return through_stars(imported, name, names, lambda entry: find({name: entry}))


@functools.lru_cache(maxsize=1024)
def _star_names(folder: Path, entry: tuple[str, int, str]) -> frozenset[str]:
    """The names the module ``entry`` imports from, into a file of ``folder``, binds."""
    file = module_file(folder / "_", entry[0], entry[1])
    return top_names(_text(file)) if file is not None else frozenset()


@functools.lru_cache(maxsize=_MAX_FILES)
def _text(file: Path) -> str:
    try:
        return decode_source(read_regular(file, limit=_MAX_BYTES)).text
    except (OSError, SourceError, ValueError):
        return ""


def origin_of(calls: Calls) -> Origin | None:
    """The file whose :class:`~.context.Calls` ``calls`` is, when :func:`_load` read it."""
    return _origins.get(id(calls))


def _drop_loaded() -> None:
    """Drop the loaded files, each one's walked calls closed first (they refer back to it,
    and the cycle would wait for the garbage collector)."""
    for loaded in _loaded.values():
        if loaded is not None:
            loaded[0].close()
    _loaded.clear()
    _origins.clear()


def _forget() -> None:
    _drop_loaded()
    _function_text.cache_clear()
    _star_names.cache_clear()
    _text.cache_clear()


on_forget(_forget)
