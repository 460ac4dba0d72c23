"""Helpers that another file of the linted tree defines, called on a forward path
(``from .noise import make_noise`` ... ``make_noise(h, w)``, ``from pkg.utils import grid``,
``import pkg.utils as U`` ... ``U.grid(n)``): each is walked with the rules in its own file,
as a function of the same file that a forward path calls is, and its findings are reported
at their lines in that file. A helper that takes no tensor (a noise or grid factory) is
otherwise never linted: a file without ``def forward`` is not parsed.

A tensor the helper makes is followed out through its ``return`` into the calls of the
forward path, as a same-file helper's is (:func:`~.reach.to_callers`). The other file is
read only when such a call is met, once per process (see :mod:`.imported`); the functions
of its file that the helper calls are walked with it. A finding the helper's own file
reports as well is reported once (:func:`unique`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from halfprec.leaks.lint.context import Calls, Check, Context
from halfprec.leaks.lint.findings import FileResult, Finding
from halfprec.leaks.lint.flow import walk_function
from halfprec.leaks.lint.imported import (
    Imported,
    defines_maker,
    module_defines_maker,
    origin_of,
)
from halfprec.leaks.lint.memo import run_dict
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.scope import (
    ForwardPath,
    Function,
    Imports,
    Program,
    called_names,
)
from halfprec.leaks.lint.suppress import is_suppressed, suppressions
from halfprec.leaks.lint.values import value_of

__all__ = ["Helper", "helper_findings", "helpers_called", "unique"]

_MAX_WALKED = 32  # functions of the helper's file walked for one helper
_FACTORY = re.compile(
    r"\b(zeros|ones|empty|full|rand|randn|randint|randperm|arange|linspace|logspace|eye|"
    r"tensor|as_tensor)\s*\("
)
Raw = tuple[int, int, str, str]  # line, col, code, message
Silenced = dict[int, frozenset[str]]
Helper = tuple[Calls, Function, ast.Call, Context]  # its file, it, one call, the caller
# a helper's file: its hot lines and suppressions, by id of its walked calls
_READ = run_dict(dict[int, tuple[Calls, frozenset[int], Silenced]])
_MAX_READ = 128


def helpers_called(
    path: str,
    fpath: ForwardPath,
    program: Program,
    imported: Callable[[], Imported],
    calls: Calls,
) -> list[Helper]:
    """The calls ``fpath`` makes of functions of other files of the tree: by an imported
    name (``grid(...)``) or as an attribute of an imported module (``U.grid(...)``).
    ``imported``: the file's imported names, read only where the path calls a bare name
    that no function of the file has, or an attribute of a name other than ``self``."""
    fn = fpath.function
    bare = {n for on_self, n in fpath.called if not on_self} - program.functions.keys()
    held_by = {(h, attr) for on_self, h, attr in fpath.held if not on_self}
    if not bare and not held_by:
        return []  # nothing it calls can be another file's function: no import is read
    names = imported()
    wanted = {n for n in bare & names.keys() if defines_maker(path, names, n, _FACTORY)}
    held = {
        h
        for h, attr in held_by
        if h in names and module_defines_maker(path, names, h, attr, _FACTORY)
    }
    if not wanted and not held:
        return []  # the regex read of the text finds no candidate: no tree walk
    found: list[Helper] = []
    caller: Context | None = None
    for node in walk(fn):
        if not isinstance(node, ast.Call):
            continue
        func, there = node.func, None
        if isinstance(func, ast.Name) and func.id in wanted and calls.function:
            there = calls.function(func.id)
        elif isinstance(func, ast.Attribute):
            there = _module_function(func, held, calls)
        if there is None or origin_of(there[0]) is None or not _makes_tensors(*there):
            continue
        if caller is None:
            caller = calls.context(fn, fpath.facts, fpath.is_forward)
        if _given_tensor(node, caller):
            continue  # a tensor it is given is followed into it by the data flow (.reach)
        found.append((*there, node, caller))
    return found


def _makes_tensors(there: Calls, fn: Function) -> bool:
    """Whether ``fn``, or a function of its file that it calls, calls a tensor factory
    (read from the text: most helpers make none, and are then not walked)."""
    todo, done = [fn], set[int]()
    while todo and len(done) < _MAX_WALKED:
        current = todo.pop()
        if id(current) in done:
            continue
        done.add(id(current))
        end = current.end_lineno or current.lineno
        if _FACTORY.search("\n".join(there.lines[current.lineno - 1 : end])):
            return True
        todo.extend(
            there.program.functions[name]
            for on_self, name in called_names(current, there.lines)
            if not on_self and name in there.program.functions
        )
    return False


def _given_tensor(call: ast.Call, caller: Context) -> bool:
    """Whether ``call`` passes a value the caller knows or guesses to be a floating tensor."""
    at = caller.at(call)
    args = [*call.args, *(k.value for k in call.keywords)]
    return any(value_of(a.value if isinstance(a, ast.Starred) else a, at) is not None for a in args)


def _module_function(
    func: ast.Attribute, held: set[str], calls: Calls
) -> tuple[Calls, Function] | None:
    """``U.grid`` of a module ``U`` imported from another file of the tree: that function."""
    holder = func.value
    if not isinstance(holder, ast.Name) or holder.id not in held or calls.module is None:
        return None
    return calls.module(holder.id, func.attr)


def helper_findings(
    helpers: list[Helper],
    checks: Callable[[frozenset[str]], list[Check]],
    enabled: Callable[[str], frozenset[str]],
    hot_lines: Callable[[str, list[str], frozenset[str]], frozenset[int]],
) -> list[Finding]:
    """The rules' findings in each helper (and the functions of its file it calls), at
    their lines in the helper's file, its result followed on at the given calls; none of
    them carries a fix (its file is not the one being fixed)."""
    by_helper: dict[tuple[int, int], list[Helper]] = {}
    for helper in helpers:
        by_helper.setdefault((id(helper[0]), id(helper[1])), []).append(helper)
    findings: list[Finding] = []
    for group in by_helper.values():
        there, fn = group[0][0], group[0][1]
        origin = origin_of(there)
        if origin is None:
            continue
        there.outside[id(fn)] = [(call, caller) for _, _, call, caller in group]
        try:
            kept = _READ.get(id(there))
            if kept is None or kept[0] is not there:  # read once per file, not per caller
                if len(_READ) >= _MAX_READ:
                    _READ.clear()  # each entry holds its file's tree
                hot = hot_lines(origin.text, there.lines, origin.imports.torch)
                kept = _READ[id(there)] = (there, hot, suppressions(origin.text))
            codes = enabled(origin.path)
            raw = _walk(there, fn, origin.imports, checks(codes), kept[2], kept[1])
        finally:
            del there.outside[id(fn)]
        findings.extend(
            Finding(origin.path, line, col, code, message)
            for line, col, code, message in raw
            if code in codes
        )
    return findings


def _walk(
    there: Calls,
    fn: Function,
    imports: Imports,
    checks: list[Check],
    silenced: Silenced,
    hot: frozenset[int],
) -> list[Raw]:
    todo, done, raw = [fn], set[int](), list[Raw]()
    while todo and len(done) < _MAX_WALKED:
        current = todo.pop()
        if id(current) in done:
            continue
        done.add(id(current))
        ctx = walk_function(current, imports, there.lines, checks, hot_lines=hot, calls=there)
        for node, code, message, _ in ctx.found:
            line = getattr(node, "lineno", 1)
            col = ctx.char_col(line, getattr(node, "col_offset", 0)) + 1
            if not is_suppressed(silenced, line, code):
                raw.append((line, col, code, message))
        todo.extend(
            there.program.functions[name]
            for on_self, name in called_names(current, there.lines)
            if not on_self and name in there.program.functions
        )
    return raw


def unique(results: list[FileResult]) -> list[FileResult]:
    """``results`` with each finding in another file than its result's reported once: not
    where that file's own result, or an earlier result, reports it."""
    seen = {
        (f.path, f.line, f.col, f.code) for r in results for f in r.findings if f.path == r.path
    }
    for result in results:
        kept: list[Finding] = []
        for f in result.findings:
            key = (f.path, f.line, f.col, f.code)
            if f.path != result.path and key in seen:
                continue
            seen.add(key)
            kept.append(f)
        result.findings = kept
    return results
