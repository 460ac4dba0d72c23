"""Read a ``.pt2`` file so that nothing in it can run code, then hand torch a vetted copy.

``torch.export.load`` trusts the archive: pickled weights, constants and sample inputs are
read with ``torch.load(weights_only=False)`` (sample inputs after a weights-only try),
symbolic shape strings go through ``sympy.sympify`` (which calls ``eval``), stored
``guards_code`` is compiled into the loaded module, node targets may name any callable
under ``torch``, and names from the file are pasted into generated Python source.

This module reads the archive itself and rebuilds it in memory with only what a program
needs to run: raw tensor bytes (no pickle), the program JSON with node metadata, guards
and sample inputs removed, every node target resolving to a torch operator, every shape
expression in a small grammar, and every name made of plain name characters. Anything
else is refused with :class:`~halfprec.export.config.ExportError`. Call the module of the
returned program with ``check_guards=False`` so no guard code is generated from the file.

Before any member is inflated, the zip's directory is checked against the limits below (a
zip bomb is refused, not inflated): at most ``MAX_MEMBERS`` members, each one of the kinds
the loader needs, JSON members of at most ``MAX_JSON_BYTES`` each, and all members together
at most ``MAX_INFLATION`` times the file's size plus ``INFLATION_SLACK_BYTES`` (torch
stores its members uncompressed, so its own files inflate 1:1).
"""

from __future__ import annotations

import io
import json
import math
import operator
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from halfprec.export.config import ExportError
from halfprec.export.pt2_ops import refusal
from halfprec.modules import first_line

MAX_MEMBERS = 100_000
MAX_JSON_BYTES = 64 * 2**20  # each program / config / extra member
MAX_INFLATION = 4  # all members together, inflated, at most 4x the file ...
INFLATION_SLACK_BYTES = 16 * 2**20  # ... plus 16 MiB

_FORMAT = ("archive_format", "pt2")
_VERSION = ("archive_version", "0")
_WRITER_OWN = {".data/version", "byteorder", ".data/serialization_id"}
_MODEL = re.compile(r"^models/([A-Za-z0-9_]+)\.json$")
_WEIGHT = re.compile(r"^data/weights/weight_\d+$")
_CONSTANT = re.compile(r"^data/constants/tensor_\d+$")
_CONFIG = re.compile(r"^data/(weights|constants)/([A-Za-z0-9_]+)_(weights|constants)_config\.json$")
_SAMPLE = re.compile(r"^data/sample_inputs/[A-Za-z0-9_]+\.pt$")
_EXTRA = re.compile(r"^extra/[A-Za-z0-9_.\-]+$")
_NAME = re.compile(r"^[A-Za-z0-9_.+\-]*$")
_PAYLOAD = re.compile(r"^(weight|tensor)_\d+$")

# Strings torch passes to generated code with repr() (safe), or that are checked below.
_QUOTED_KEYS = {"as_string", "as_strings"}
_EXPR_TOKEN = re.compile(
    r"\s+|'[A-Za-z][A-Za-z0-9_]*'|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z][A-Za-z0-9_]*"
    r"|\*\*|//|==|!=|<=|>=|[-+*/%<>(),=~&|]"
)
_SYMBOL = re.compile(r"^[a-z]+\d+$")
_SYMPY_NAMES = {
    "Symbol",
    "Integer",
    "Rational",
    "Float",
    "Add",
    "Mul",
    "Pow",
    "Max",
    "Min",
    "Eq",
    "Ne",
    "Lt",
    "Le",
    "Gt",
    "Ge",
    "StrictLessThan",
    "StrictGreaterThan",
    "LessThan",
    "GreaterThan",
    "Equality",
    "Unequality",
    "And",
    "Or",
    "Not",
    "Abs",
    "floor",
    "ceiling",
    "sqrt",
    "oo",
    "zoo",
    "nan",
    "true",
    "false",
    "True",
    "False",
    "None",
    "Piecewise",
    "ExprCondPair",
    "positive",
    "negative",
    "nonnegative",
    "nonpositive",
    "integer",
    "real",
    "finite",
    "infinite",
    "zero",
    "nonzero",
    "even",
    "odd",
    "rational",
    "commutative",
    "extended_real",
}
_SPEC_TYPES = {
    None,
    "builtins.tuple",
    "builtins.list",
    "builtins.dict",
    "collections.OrderedDict",
    "collections.defaultdict",
    "collections.deque",
    "torch.fx.immutable_collections.immutable_list",
    "torch.fx.immutable_collections.immutable_dict",
}


def vetted_archive(path: Path) -> io.BytesIO:
    """A rebuilt in-memory copy of the ``.pt2`` at ``path`` that loads without running code."""
    from torch.export.pt2_archive import PT2ArchiveReader, PT2ArchiveWriter

    data = path.read_bytes()  # one read: what is checked is what torch gets
    _check_directory(data, path)
    try:
        reader = PT2ArchiveReader(io.BytesIO(data))
        names = reader.get_file_names()
        records = {n: reader.read_bytes(n) for n in names}
    except Exception as exc:  # not a zip, not a PT2 archive, a missing record
        raise ExportError(
            f"{path} is not a loadable torch.export file ({first_line(exc)}); write it "
            "with torch.export.save or halfprec export"
        ) from None
    for key, value in (_FORMAT, _VERSION):
        if records.get(key, b"").decode(errors="replace") != value:
            raise _refuse(path, f"{key} is not {value!r}; it was not written by torch 2.13")
    out: dict[str, bytes] = {}
    models = [m.group(1) for n in records if (m := _MODEL.match(n))]
    if not models:
        raise _refuse(path, "it holds no exported program")
    for name, raw in records.items():
        if name in _WRITER_OWN or name in (_FORMAT[0], _VERSION[0]):
            continue
        if _MODEL.match(name):
            out[name] = json.dumps(_clean_program(_json(path, name, raw), path)).encode()
        elif _CONFIG.match(name):
            _check_payload_config(_json(path, name, raw), path, name)
            out[name] = raw
        elif _WEIGHT.match(name) or _CONSTANT.match(name) or _EXTRA.match(name):
            out[name] = raw
        elif _SAMPLE.match(name):
            out[name] = b""  # pickled sample inputs: not needed to run, never unpickled
        else:
            raise _refuse(path, f"it holds {name}, which halfprec does not load")
    buffer = io.BytesIO()
    with PT2ArchiveWriter(buffer) as writer:
        for name, raw in out.items():
            writer.write_bytes(name, raw)
    buffer.seek(0)
    return buffer


def _needed(name: str) -> bool:
    """Whether the loader reads a member of this name (inside the archive's folder)."""
    return (
        name in _WRITER_OWN
        or name in (_FORMAT[0], _VERSION[0])
        or any(p.match(name) for p in (_MODEL, _CONFIG, _WEIGHT, _CONSTANT, _EXTRA, _SAMPLE))
    )


def _check_directory(data: bytes, path: Path) -> None:
    """Refuse, from the zip's directory alone, members the loader does not need and sizes
    beyond the module's limits, before anything is inflated."""
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        return  # not a zip: PT2ArchiveReader says so below
    if len(infos) > MAX_MEMBERS:
        raise _refuse(path, f"it holds {len(infos)} members, more than {MAX_MEMBERS}")
    total = 0
    for info in infos:
        name = info.filename.partition("/")[2]  # members sit in one top-level folder
        if info.is_dir():
            continue
        if not _needed(name):
            raise _refuse(path, f"it holds {info.filename[:80]}, which halfprec does not load")
        text = name.endswith(".json") or name.startswith("extra/")
        if text and info.file_size > MAX_JSON_BYTES:
            raise _refuse(
                path,
                f"{name} inflates to {info.file_size} bytes, more than the "
                f"{MAX_JSON_BYTES} allowed for a JSON member",
            )
        total += info.file_size
    allowed = MAX_INFLATION * len(data) + INFLATION_SLACK_BYTES
    if total > allowed:
        raise _refuse(
            path,
            f"its members inflate to {total} bytes from a {len(data)}-byte file, more than "
            f"the {allowed} allowed (a zip bomb?)",
        )


def _refuse(path: Path, why: str) -> ExportError:
    return ExportError(
        f"refusing to load {path}: {why}; only .pt2 files of plain tensors and torch "
        "operators are loaded (re-export it with halfprec export)"
    )


def _json(path: Path, name: str, raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise _refuse(path, f"{name} is not valid JSON ({first_line(exc)})") from None


def _check_payload_config(config: Any, path: Path, name: str) -> None:
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise _refuse(path, f"{name} has no config table")
    for fqn, meta in entries.items():
        if not isinstance(meta, dict) or meta.get("use_pickle") is not False:
            raise _refuse(path, f"{fqn!r} in {name} is stored as a pickle")
        if not _PAYLOAD.match(str(meta.get("path_name"))):
            raise _refuse(path, f"{fqn!r} in {name} is not a plain tensor")
        _check_strings(meta, path, fqn)
        if not _NAME.match(fqn):
            raise _refuse(path, f"tensor name {fqn[:60]!r} holds characters other than a name")


def _clean_program(program: Any, path: Path) -> Any:
    if not isinstance(program, dict) or not isinstance(program.get("graph_module"), dict):
        raise _refuse(path, "its program JSON has no graph_module")
    program["guards_code"] = []
    program["graph_module"]["metadata"] = {}
    _strip_node_metadata(program["graph_module"])
    _check_strings(program, path, "")
    return program


def _strip_node_metadata(obj: Any) -> None:
    if isinstance(obj, dict):
        if "target" in obj and "inputs" in obj and "outputs" in obj:
            obj["metadata"] = {}
        for value in obj.values():
            _strip_node_metadata(value)
    elif isinstance(obj, list):
        for value in obj:
            _strip_node_metadata(value)


def _check_strings(obj: Any, path: Path, key: str) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if key == "range_constraints" and isinstance(k, str):
                _check_expr(k, path)  # keyed by symbols and by formulas ("s22 + s70")
            elif not isinstance(k, str) or not _NAME.match(k):
                raise _refuse(path, f"key {str(k)[:60]!r} holds characters other than a name")
            if k in ("target", "as_operator") and isinstance(v, str):
                op = _check_target(v, path)
                why = refusal(op, obj) if k == "target" and op is not None else None
                if why is not None:
                    raise _refuse(path, f"node {str(v)[:80]!r} {why}")
            else:
                _check_strings(v, path, k)
    elif isinstance(obj, list):
        for v in obj:
            _check_strings(v, path, key)
    elif isinstance(obj, str) and key not in _QUOTED_KEYS:
        if key == "expr_str":
            _check_expr(obj, path)
        elif key in ("in_spec", "out_spec"):
            _check_spec(obj, path)
        elif not _NAME.match(obj):
            raise _refuse(path, f"{key} {obj[:60]!r} holds characters other than a name")


def _check_expr(text: str, path: Path) -> None:
    pos = 0
    while pos < len(text):
        m = _EXPR_TOKEN.match(text, pos)
        if m is None:
            raise _refuse(path, f"shape expression {text[:60]!r} is not a plain formula")
        token = m.group(0)
        if token[0].isalpha() and token not in _allowed_names() and not _SYMBOL.match(token):
            raise _refuse(path, f"shape expression {text[:60]!r} names {token!r}")
        pos = m.end()


def _allowed_names() -> set[str]:
    import torch.utils._sympy.functions as functions

    return _SYMPY_NAMES | {n for n in vars(functions) if not n.startswith("_")}


def _check_spec(text: str, path: Path) -> None:
    try:
        spec = json.loads(text)
    except ValueError:
        raise _refuse(path, f"pytree spec {text[:60]!r} is not JSON") from None
    _check_spec_node(spec, path)


def _check_spec_node(node: Any, path: Path) -> None:
    if isinstance(node, list):
        for item in node:
            _check_spec_node(item, path)
    elif isinstance(node, dict):
        if node.get("type") not in _SPEC_TYPES:
            raise _refuse(path, f"pytree spec names type {str(node.get('type'))[:60]!r}")
        context = node.get("context")
        if isinstance(context, str):
            try:
                parsed = json.loads(context)
            except ValueError:
                raise _refuse(path, "a pytree context is not JSON") from None
            _check_strings(parsed, path, "context")
        _check_spec_node(node.get("children_spec", []), path)
    elif node is not None and not isinstance(node, int):
        raise _refuse(path, "a pytree spec holds an unexpected value")


def _check_target(target: str, path: Path) -> Any:
    """A node target must resolve to a torch operator or one of torch's symbolic-int ops;
    the operator, or ``None`` for a symbolic-int op."""
    from torch._export.serde.serialize import _SYM_OPS

    roots: dict[str, Any] = {"torch": torch, "_operator": operator, "math": math}
    head, *rest = target.split(".")
    resolved: Any = roots.get(head)
    if resolved is None or not _NAME.match(target):
        raise _refuse(path, f"node target {target[:80]!r} is not a torch operator")
    for part in rest:
        # dunder names only as aten operators (aten.__and__, aten.__or__: masks in HF models)
        dunder_op = isinstance(resolved, torch._ops._OpNamespace) and isinstance(
            getattr(resolved, part, None), torch._ops.OpOverloadPacket
        )
        if (part.startswith("__") and not dunder_op) or not hasattr(resolved, part):
            raise _refuse(path, f"node target {target[:80]!r} is not a torch operator")
        resolved = getattr(resolved, part)
    ops = (torch._ops.OpOverload, torch._ops.HigherOrderOperator)
    if isinstance(resolved, ops):
        why = refusal(resolved, {})  # the operator alone: as a target and as an argument
        if why is not None:
            raise _refuse(path, f"node target {target[:80]!r} {why}")
        return resolved
    if resolved not in _SYM_OPS:
        raise _refuse(path, f"node target {target[:80]!r} is not a torch operator")
    return None
