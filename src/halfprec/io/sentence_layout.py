"""A sentence-transformers folder (``modules.json``) written as a half folder.

halfprec converts the folder's transformer, stored at the folder's top (``path: ""`` in
``modules.json``), and writes it as any Hugging Face folder; this module adds what
sentence-transformers reads besides it: the top-level files (``modules.json``,
``sentence_bert_config.json``, tokenizer files: copied as every folder's side files are)
and each other module's folder (``1_Pooling/config.json``, ``2_Normalize``), copied as
they are. So ``SentenceTransformer(DIR)`` loads the half transformer with the same pooling
and normalization, and plain ``AutoModel.from_pretrained(DIR)`` loads it too.

Only layouts whose other modules hold no weights are written: Pooling and Normalize.
:func:`layout_problem` refuses any other (a Dense projection, whose fp32 weights would
meet half inputs; a transformer in a subfolder) in one line before any work.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from halfprec.readfile import read_text_regular

MODULES_FILE = "modules.json"
_NO_WEIGHTS = ("Pooling", "Normalize")
_LIMIT = 2**20


def _modules(folder: Path) -> list[dict[str, Any]] | str:
    """The entries of ``folder``'s modules.json, or why they cannot be read."""
    where = folder / MODULES_FILE
    try:
        data = json.loads(read_text_regular(where, limit=_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:
        return f"{where} cannot be read as JSON ({' '.join(str(exc).split())[:120]}); fix it"
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        return f"{where} is not a list of modules; fix it"
    return data


def layout_problem(folder: str | Path) -> str | None:
    """Why the sentence-transformers folder ``folder`` cannot be written as a half folder
    faithfully, in one line; None when it can, or when it has no modules.json."""
    root = Path(folder)
    if not (root / MODULES_FILE).is_file():
        return None
    entries = _modules(root)
    if isinstance(entries, str):
        return entries
    for entry in entries:
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
        path = str(entry.get("path", ""))
        if kind == "Transformer" and path not in ("", "."):
            return (
                f"{root}: its transformer is in the subfolder {path!r}; halfprec converts a "
                'sentence-transformers folder whose transformer is at its top (path ""): '
                f"give {root / path} as MODEL, or convert to a .safetensors file"
            )
        if kind not in ("Transformer", *_NO_WEIGHTS):
            return (
                f"{root}: its module {entry.get('type')!r} ({path or 'top'}) is not converted "
                "by halfprec (only the transformer is; Pooling and Normalize hold no "
                "weights); convert the transformer alone to a .safetensors file"
            )
    return None


def transformer_subfolder(folder: str | Path) -> str | None:
    """The subfolder of a sentence-transformers ``folder`` that holds its transformer (an
    older layout: ``0_Transformer``, ``0_BERT``), else None."""
    root = Path(folder)
    if not (root / MODULES_FILE).is_file():
        return None
    entries = _modules(root)
    for entry in entries if isinstance(entries, list) else ():
        path = str(entry.get("path", ""))
        if str(entry.get("type", "")).endswith("Transformer") and path not in ("", "."):
            return path
    return None


def copy_module_folders(source: Path, dest: Path) -> list[str]:
    """Copy each module folder named in ``source``'s modules.json (not the transformer's,
    which is the folder's top) into ``dest``; returns their names."""
    if not (source / MODULES_FILE).is_file():
        return []
    entries = _modules(source)
    if isinstance(entries, str):
        raise ValueError(entries)  # layout_problem refused this before any work
    copied = []
    for entry in entries:
        path = str(entry.get("path", ""))
        if path in ("", ".") or not (source / path).is_dir():
            continue
        shutil.copytree(source / path, dest / path, symlinks=False)
        copied.append(path)
    return copied


_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
}


def sentence_head(folder: Path) -> tuple[str, bool] | str:
    """What sentence-transformers runs after ``folder``'s transformer: its pooling mode
    (from the Pooling module's ``config.json``) and whether a Normalize module follows, or
    why halfprec cannot run the same (another module, another or a combined pooling mode),
    in a sentence."""
    entries = _modules(folder)
    if isinstance(entries, str):
        return entries
    kinds = [str(e.get("type", "")).rsplit(".", 1)[-1] for e in entries]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return (
            f"its modules.json runs {', '.join(kinds)}, where halfprec runs Transformer, "
            "Pooling and Normalize only"
        )
    where = folder / str(entries[1].get("path", "")) / "config.json"
    try:
        config = json.loads(read_text_regular(where, limit=_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:
        return f"{where} cannot be read as JSON ({' '.join(str(exc).split())[:120]})"
    on = [mode for key, mode in _MODES.items() if isinstance(config, dict) and config.get(key)]
    extra = [
        k
        for k, v in (config.items() if isinstance(config, dict) else ())
        if k.startswith("pooling_mode_") and v and k not in _MODES
    ]
    if len(on) != 1 or extra:
        named = ", ".join(on + extra) or "none"
        return f"its pooling modes ({named}) are not one of mean, cls, max, mean_sqrt_len"
    return on[0], kinds[-1] == "Normalize"
