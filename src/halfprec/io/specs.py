"""Resolve a MODEL spec to a module and its example inputs.

MODEL forms:

- ``builtin:NAME``: the built-in zoo (``minilm``, ``bert-base``, ``gpt2``, ``cnn``);
- ``package.module:factory``: a callable returning an ``nn.Module``;
- ``path/to/file.py:factory``: the same, from a file;
- a Hugging Face model directory (``config.json`` plus weights);
- a TorchScript file (``torch.jit.save`` output).

Example inputs for a factory: the factory's module may define ``example_inputs()``
(or ``<factory>_example_inputs()``, which wins), returning one batch or a list of
batches in the convention of :mod:`halfprec.batch`.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import linecache
import math
import pickle
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch, as_batches
from halfprec.dtypes import dtype_name
from halfprec.errors import CheckpointError, ModelSpecError, clip
from halfprec.io.sentence_layout import transformer_subfolder
from halfprec.io.spec_names import SPEC_HELP
from halfprec.io.tensorfile import TensorFile
from halfprec.io.zoo import BUILTINS, SentenceEncoder, import_transformers
from halfprec.modules import first_line
from halfprec.readfile import (
    open_regular,
    read_regular,
    read_text_regular,
    refusal,
    special_file_in,
)


@dataclass
class LoadedModel:
    """A model resolved from a spec, in eval mode, with its example batches (maybe none)."""

    model: nn.Module
    example_inputs: list[Batch] = field(default_factory=list)
    name: str = ""
    source: str = ""
    stored_dtype: str = ""
    """Hugging Face directories: the dtype(s) of the stored weights (``"bf16"``, ...)."""
    notes: list[str] = field(default_factory=list)
    """What loading chose for the user (e.g. padding with eos), one sentence each."""
    no_inputs: str = ""
    """Why no example batch could be built: the inputs the model needs (``--inputs`` gives
    them)."""
    inputs_built: list[str] = field(default_factory=list)
    """Hugging Face directories: what halfprec built each example input from, one phrase
    each (the example batches are halfprec's, not the user's)."""


def load_model(spec: str) -> LoadedModel:
    """Resolve ``spec`` (see module docs); raises :class:`ModelSpecError` with the fix."""
    spec = spec.strip()
    if spec.startswith("builtin:"):
        return _builtin(spec.removeprefix("builtin:"))
    path = Path(spec)
    if path.is_dir():
        return _hf_directory(path)
    if path.is_file():
        return _torchscript(path)
    if ":" in spec:
        target, _, factory = spec.rpartition(":")
        if target.endswith(".py"):
            return _from_module(_import_file(Path(target)), factory, spec)
        return _from_module(_import_module(target), factory, spec)
    if spec.endswith((".py", ".pt", ".pth", ".ts", ".jit")) or "/" in spec:
        problem = refusal("model file or directory", path)
        raise ModelSpecError(problem or f"model file or directory {spec!r} not found")
    raise ModelSpecError(f"unknown MODEL {spec!r}; {SPEC_HELP}")


def model_path(spec: str) -> Path | None:
    """The file or folder that MODEL ``spec`` reads (``None`` for a builtin or an importable
    module, whose files are the installation's)."""
    spec = spec.strip()
    if spec.startswith("builtin:"):
        return None
    if Path(spec).exists() or Path(spec).is_symlink():
        return Path(spec)
    target = spec.rpartition(":")[0]
    return Path(target) if target.endswith(".py") else None


def _builtin(name: str) -> LoadedModel:
    entry = BUILTINS.get(name)
    if entry is None:
        raise ModelSpecError(
            f"unknown builtin model {name!r}; choose one of: {', '.join(BUILTINS)}"
        )
    model, batches = entry.build()
    return LoadedModel(model.eval(), batches, name=f"builtin:{name}", source=entry.description)


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ModelSpecError(
            f"cannot import module {name!r} ({exc}); check the name and that it is on PYTHONPATH"
        ) from None
    except SystemExit as exc:
        raise ModelSpecError(
            f"importing module {name!r} raised SystemExit: {exc}; fix the module"
        ) from exc


_SOURCE_LIMIT = 64 * 2**20  # a model file's source, read through the regular-file rule

_RAN: dict[str, tuple[bytes, ModuleType]] = {}
"""Model files already run in this process, with the SHA-256 of the source each ran: a file
runs again only when its bytes changed, as Python imports a module once. Running it again would
define its ``torch.library.custom_op`` operators a second time; torch then destroys the first
definitions, and a model built by the first run crashes the process when called (SIGSEGV)."""


def _import_file(path: Path) -> ModuleType:
    """Run the model file ``path`` as a module: its source read once as a regular file and
    compiled from those bytes, so no bytecode cache (``__pycache__/*.pyc``, which may be a
    FIFO or a link to ``/dev/zero``) is ever read or written for it."""
    problem = refusal("model file", path)
    if problem is not None:
        raise ModelSpecError(problem)
    try:
        source = read_regular(path, limit=_SOURCE_LIMIT)
    except OSError as exc:
        raise ModelSpecError(f"cannot read model file {path} ({exc}); give a .py file") from None
    filename = str(path.resolve())
    text = source.decode("utf-8", errors="replace")
    # tracebacks and inspect read source lines from linecache: serve them from these bytes
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    mod_name = f"_halfprec_user_{abs(hash(filename))}"
    digest = hashlib.sha256(source).digest()
    ran = _RAN.get(mod_name)
    if ran is not None and ran[0] == digest and sys.modules.get(mod_name) is ran[1]:
        return ran[1]
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise ModelSpecError(f"{path} is not valid Python ({exc}); fix the file") from None
    module = ModuleType(mod_name)
    module.__file__ = filename
    sys.modules[mod_name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 (the user's model file: code by design)
    except (Exception, SystemExit) as exc:  # sys.exit() at import must not end halfprec
        del sys.modules[mod_name]
        raise ModelSpecError(
            f"importing {path} raised {type(exc).__name__}: {exc}; fix the file"
        ) from exc
    _RAN[mod_name] = (digest, module)
    return module


def _from_module(module: ModuleType, factory_name: str, spec: str) -> LoadedModel:
    factory = getattr(module, factory_name, None)
    if factory is None or not callable(factory):
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        raise ModelSpecError(
            f"{spec!r}: no callable {factory_name!r} in {_where(module)}"
            f" (callables: {', '.join(public[:6]) or 'none'}); name a function returning nn.Module"
        )
    try:
        model = factory()
    except (Exception, SystemExit) as exc:
        raise ModelSpecError(
            f"{spec!r}: the factory raised {type(exc).__name__}: {exc}; fix the factory"
        ) from exc
    if not isinstance(model, nn.Module):
        raise ModelSpecError(
            f"{spec!r}: the factory returned {type(model).__name__}, not an nn.Module; "
            "return the model itself"
        )
    inputs_fn = getattr(module, f"{factory_name}_example_inputs", None) or getattr(
        module, "example_inputs", None
    )
    batches: list[Batch] = []
    if callable(inputs_fn):
        try:
            batches = as_batches(inputs_fn())
        except (Exception, SystemExit) as exc:
            raise ModelSpecError(
                f"{spec!r}: example_inputs() raised {type(exc).__name__}: {exc}; fix it"
            ) from exc
    return LoadedModel(model.eval(), batches, name=spec, source=getattr(module, "__file__", ""))


def _where(module: ModuleType) -> str:
    """The module's file for modules imported from a path (their names are internal)."""
    name = module.__name__
    return str(getattr(module, "__file__", name)) if name.startswith("_halfprec_user_") else name


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt")


def _weight_files(path: Path) -> list[str]:
    return sorted(f.name for f in path.iterdir() if f.name.endswith(_WEIGHT_SUFFIXES))


def _no_config(path: Path) -> str:
    inner = transformer_subfolder(path)
    if inner is not None:
        return (
            f"{path} is a sentence-transformers folder whose transformer is in its subfolder "
            f"{inner!r}, with no config.json at its top; give {path / inner} as MODEL (the "
            "transformer alone, without the folder's pooling)"
        )
    weights = _weight_files(path)
    if weights:
        return (
            f"{path} holds weights ({', '.join(weights[:3])}) but no config.json, so no model "
            f"can be built from it; add the model's config.json, or give a MODEL spec that "
            f"builds the model and --weights {path / weights[0]}"
        )
    return f"{path} is a folder without config.json; give a Hugging Face model directory"


def _hf_directory(path: Path) -> LoadedModel:
    """A Hugging Face directory loaded in fp32 whatever dtype it was stored in (the fp32
    reference), with no code from the directory run (``trust_remote_code=False``)."""
    special = special_file_in(path)
    if special is not None:
        raise ModelSpecError(special)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelSpecError(_no_config(path))
    tf = import_transformers()
    cls = _architecture(tf, config_file)
    from safetensors import SafetensorError

    try:
        model = cls.from_pretrained(str(path), dtype=torch.float32, trust_remote_code=False)
    except pickle.UnpicklingError:  # torch.load(weights_only=True) refused a .bin's objects
        raise ModelSpecError(
            f"refusing to unpickle the weights in {path}: they hold objects or code, not just "
            "tensors; convert them to safetensors in a trusted environment"
        ) from None
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
        raise _load_error(path, exc) from None
    stored = stored_dtype(path)
    notes = []
    if stored not in ("", "fp32"):
        notes.append(
            f"{path} stores {stored} weights; they are loaded in fp32 for the reference "
            "(fp32 upcast of the stored values)"
        )
    from halfprec.io.hf_inputs import NoExampleInputs, example_batches

    batches: list[Batch] = []
    no_inputs = ""
    built: list[str] = []
    try:
        batches = example_batches(model, path, notes, built)
    except NoExampleInputs as exc:  # an error only when no --inputs supplies them
        no_inputs = exc.problem
    if (path / "modules.json").is_file():
        model = _sentence_encoder(model, path, notes)
    return LoadedModel(
        model.eval(),
        batches,
        name=str(path),
        source="Hugging Face directory",
        stored_dtype=stored,
        notes=notes,
        no_inputs=no_inputs,
        inputs_built=built,
    )


def _sentence_encoder(model: nn.Module, path: Path, notes: list[str]) -> nn.Module:
    """A sentence-transformers folder's transformer with the pooling and normalization its
    modules.json names, when halfprec runs the same; else the transformer alone, with a
    note that says why."""
    from halfprec.io.sentence_layout import sentence_head

    head = sentence_head(path)
    takes = inspect.signature(model.forward).parameters
    if isinstance(head, tuple) and "token_type_ids" not in takes:
        head = f"its {type(model).__name__} takes no token_type_ids"
    if isinstance(head, str):
        notes.append(
            f"{path} is a sentence-transformers folder, but {head}: the outputs compared "
            "are the transformer's own, not its sentence embedding"
        )
        return model
    return SentenceEncoder(model, *head)


def _load_error(path: Path, exc: Exception) -> ModelSpecError:
    first = first_line(exc)
    if "trust_remote_code" in str(exc) or "custom code" in first:
        return ModelSpecError(
            f"{path} needs its own Python code (auto_map in its config), which halfprec "
            "never runs from a model directory; load it yourself with "
            "trust_remote_code=True in a factory and pass MODEL as path/to/file.py:factory"
        )
    if isinstance(exc, OSError) and not _weight_files(path):
        return ModelSpecError(
            f"{path} has config.json but no weights file (model.safetensors or "
            "pytorch_model.bin); write them into it with model.save_pretrained"
        )
    return ModelSpecError(
        f"cannot load the Hugging Face model in {path}: {first}; check its "
        "config.json (model_type, architectures) and weights against the installed transformers"
    )


def stored_dtype(path: Path) -> str:
    """The floating dtype(s) a Hugging Face directory stores its weights in, read from the
    safetensors headers (most elements first, ``"bf16+fp32"`` when mixed), else from
    config.json's ``dtype``/``torch_dtype``; ``""`` when neither says."""
    counts: dict[str, int] = {}
    for file in sorted(path.glob("*.safetensors")):
        try:
            weights = TensorFile(file)
        except CheckpointError:  # a stray file that is no weights
            continue
        for key in weights.names():
            dtype = dtype_name(weights.dtype(key))
            if dtype in _STORED:
                counts[dtype] = counts.get(dtype, 0) + math.prod(weights.shape(key))
    if counts:
        return "+".join(sorted(counts, key=lambda d: -counts[d]))
    try:
        config = json.loads(read_text_regular(path / "config.json", limit=_CONFIG_LIMIT))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return ""
    named = config.get("dtype") or config.get("torch_dtype") if isinstance(config, dict) else None
    if isinstance(named, str) and named in _CONFIG_DTYPES:
        return _CONFIG_DTYPES[named]
    return ""


_STORED = ("fp16", "bf16", "fp32", "fp64")
_CONFIG_LIMIT = 16 * 2**20
_CONFIG_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}


def _architecture(tf: Any, config_file: Path) -> Any:
    """The model class named by ``architectures[0]`` in config.json (AutoModel if none)."""
    try:
        config = json.loads(read_text_regular(config_file, limit=_CONFIG_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelSpecError(
            f"{config_file} is not valid JSON ({clip(str(exc))}); fix the file"
        ) from None
    archs = config.get("architectures") if isinstance(config, dict) else None
    if archs is None or archs == []:
        return tf.AutoModel
    arch = archs[0] if isinstance(archs, list) else archs
    cls = getattr(tf, arch, None) if isinstance(arch, str) and arch.isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, tf.PreTrainedModel)):
        raise ModelSpecError(
            f"{config_file}: architectures names {str(arch)[:80]!r}, which is not a "
            'transformers model class; set it to one (e.g. "BertModel") or remove it'
        )
    return cls


def _torchscript(path: Path) -> LoadedModel:
    if path.suffix == ".py":
        raise ModelSpecError(f"{path}: name the factory too, as {path}:factory_name")
    if path.suffix == ".safetensors":
        raise ModelSpecError(
            f"{path} holds weights, not a model; give the model as MODEL (a builtin, a "
            "package.module:factory spec or a Hugging Face folder) and this file as --weights"
        )
    try:
        with open_regular(path) as f:  # the file checked is the file read
            if not zipfile.is_zipfile(f):
                raise ModelSpecError(
                    f"{path} is not a TorchScript archive; save one with torch.jit.save, "
                    "or use a package.module:factory spec"
                )
            f.seek(0)
            model: Any = torch.jit.load(f, map_location="cpu")
    except ModelSpecError:
        raise
    except (RuntimeError, ValueError, OSError) as exc:
        raise ModelSpecError(
            f"{path} is not a loadable TorchScript file ({first_line(exc)}); "
            "save it with torch.jit.save"
        ) from None
    return LoadedModel(_ScriptWrapper(model).eval(), [], name=str(path), source="TorchScript")


class _ScriptWrapper(nn.Module):
    """Lets halfprec's Python hooks run around a TorchScript module (which ignores them)."""

    def __init__(self, scripted: nn.Module) -> None:
        super().__init__()
        self.scripted = scripted

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.scripted(*args, **kwargs)
