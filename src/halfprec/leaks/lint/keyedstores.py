"""A followed tensor written into a keyed container with a method: ``td.set(key, t)``
(TensorDict, a cache), ``td.set_(key, t)``, ``td.set_at_(key, t, idx)``.

The container holds ``t`` under ``key`` from there on, as ``td[key] = t`` does (see
:mod:`.statements`): the name is followed on (``return td`` hands ``t`` out of ``forward``;
``td.get(key)`` reads it back), and a container a parameter holds is the caller's, so it
holds ``t`` after the call as well. Only a store into a name is followed, with ``t`` as the
value (the second positional argument, or ``value=``/``item=``); a ``set`` of one argument
(``ContextVar.set(v)``) or of an attribute is not such a store.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import words
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Follow, to_holders

_SETS = words("set set_ set_at_")


def keyed_store(f: Follow, node: ast.AST, call: ast.Call) -> str | None:
    """``"done"`` when ``call`` stores ``t`` (``node``) into a name under a key, which is
    then followed; None when it is no such store."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in _SETS):
        return None
    holder = func.value
    if not isinstance(holder, ast.Name):
        return None
    named = any(k.value is node and k.arg in ("value", "item") for k in call.keywords)
    if not call.args or not (named or len(call.args) > 1 and call.args[1] is node):
        return None
    if _reads_entry(f, node, holder.id, key_of(call.args[0])):
        return "leak"  # td.set(k, torch.cat([td.get(k), t])): the entry made fp32
    kept, f.key = f.key, key_of(call.args[0])
    try:
        f.follow_name(holder.id, f.ctx.statement_of(call))
        if not f.fate.leaks:
            to_holders(f, holder.id)
    finally:
        f.key = kept
    return "done"


def _reads_entry(f: Follow, value: ast.AST, holder: str, key: str, depth: int = 0) -> bool:
    """Whether ``value`` is computed from the entry the store replaces: ``holder.get(key)``
    or ``holder[key]``, read in the expression or in the values its names were bound to
    before (``a = td.get(k).clone()``, then ``a = torch.cat([a, t])``)."""
    if depth > _MAX_BACK:
        return False
    for n in walk(value):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args:
            owner = n.func.value
            same = isinstance(owner, ast.Name) and owner.id == holder and n.func.attr == "get"
            if same and key_of(n.args[0]) == key:
                return True
        if isinstance(n, ast.Subscript) and _names(n.value, holder) and key_of(n.slice) == key:
            return True
        if isinstance(n, ast.Name) and n.id != holder:
            bound = f.ctx.binding_before(n)
            if bound is not None and _reads_entry(f, bound, holder, key, depth + 1):
                return True
    return False


_MAX_BACK = 4  # bindings followed back from the stored value


def _names(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def key_of(key: ast.AST) -> str:
    """The key ``t`` is stored under: a string as written, any other expression as its text
    behind a mark no string spells (``self.action_key``)."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return _MARK + ast.dump(key)


_MARK = "\0key:"


def keyed_read(f: Follow, call: ast.Call) -> str | None:
    """``td.get(key)`` of a container holding ``t`` under ``f.key``: ``"up"`` (``t``) for the
    same key, ``"safe"`` for another string, ``"unknown"`` where the keys are expressions
    that differ (they may hold the same string); None when no key is known."""
    if f.key is None or not call.args or f.key.startswith("\0#"):
        return None
    read = key_of(call.args[0])
    if read == f.key:
        f.key = None
        return "up"
    marked = read.startswith(_MARK) or f.key.startswith(_MARK)
    return "unknown" if marked else "safe"
