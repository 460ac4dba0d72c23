"""Hugging Face models made exportable, on a copy that shares the caller's weights.

Two things stop ``torch.export`` on stock transformers models:

- ``use_cache=True`` in the config makes causal LMs and encoder-decoders return a
  ``DynamicCache``/``EncoderDecoderCache`` object, which ``torch.export`` cannot put in a
  graph's outputs. :func:`without_cache` returns a copy whose configs say
  ``use_cache=False``: the artifact returns logits (and hidden states), no KV cache.
- BART-family layers (28 architectures) end with
  ``if h.dtype == torch.float16 and not torch.isfinite(h).all(): h = clamp(h)``, a branch
  on tensor values. :func:`static_fp16_clamps` rebinds those layers' ``forward`` on the
  converted copy to the same computation without the branch:
  ``h = torch.where(torch.isfinite(h).all(), h, clamp(h))`` under the (static) dtype test.

Neither touches the caller's model: copies get new configs and per-instance ``forward``.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["shared_copy", "without_cache", "static_fp16_clamps", "CACHE_NOTE", "CLAMP_NOTE"]

CACHE_NOTE = "use_cache=False on a copy of the config: the file returns no KV cache"
CLAMP_NOTE = (
    "fp16 overflow clamp of {n} layer(s) exported branch-free "
    "(torch.where on torch.isfinite(...).all())"
)


def _cached_configs(model: nn.Module) -> dict[int, Any]:
    found: dict[int, Any] = {}
    for module in model.modules():
        config = module.__dict__.get("config")
        if config is not None and getattr(config, "use_cache", False) is True:
            found[id(config)] = config
    return found


def _shallow(module: nn.Module, configs: dict[int, Any]) -> nn.Module:
    """A copy of the module tree sharing parameters and buffers (not their containers).

    The copy is made from the instance's ``__dict__``, not ``copy.copy``: torch refuses to
    copy a parametrized module (weight_norm, spectral_norm, ``register_parametrization``)
    through its pickling protocol, and its parametrizations are plain submodules here."""
    cls = type(module)
    new = cls.__new__(cls)
    state = new.__dict__
    state.update(module.__dict__)
    for key in ("_parameters", "_buffers", "_forward_hooks", "_forward_pre_hooks"):
        if key in state:
            state[key] = copy.copy(state[key])
    state["_modules"] = {
        name: None if child is None else _shallow(child, configs)
        for name, child in module._modules.items()
    }
    config = state.get("config")
    if config is not None and id(config) in configs:
        state["config"] = configs[id(config)]
    return new


def shared_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model``'s module tree that shares every parameter, buffer and config:
    per-instance ``forward`` rewrites on it leave ``model`` as it was."""
    return _shallow(model, {})


def without_cache(model: nn.Module) -> tuple[nn.Module, bool]:
    """``model`` unchanged if no config enables the KV cache, else a copy with it off.

    The copy shares every parameter and buffer with ``model`` (no memory), and has its
    own config objects with ``use_cache=False``. Returns ``(model, changed)``.
    """
    found = _cached_configs(model)
    if not found:
        return model, False
    replaced = {}
    for key, config in found.items():
        fresh = copy.deepcopy(config)
        fresh.use_cache = False
        replaced[key] = fresh
    return _shallow(model, replaced), True


def _is_clamp_test(test: ast.expr) -> ast.expr | None:
    """For ``<dtype test> and not torch.isfinite(X).all()``, the dtype test; else None."""
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return None
    if len(test.values) != 2:
        return None
    static, dynamic = test.values
    if not (isinstance(dynamic, ast.UnaryOp) and isinstance(dynamic.op, ast.Not)):
        return None
    text = ast.unparse(dynamic.operand)
    if not (text.startswith("torch.isfinite(") and text.endswith(").all()")):
        return None
    if "dtype" not in ast.unparse(static):
        return None
    return static


class _ClampRewrite(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = 0

    def visit_If(self, node: ast.If) -> Any:  # noqa: N802 (ast visitor name)
        static = _is_clamp_test(node.test)
        if static is None or node.orelse:
            return self.generic_visit(node)
        operand = node.test.values[1].operand  # type: ignore[attr-defined]
        finite = ast.unparse(operand)
        target = ast.unparse(operand.func.value.args[0])
        prologue = ast.parse(f"_hp_before = {target}\n_hp_finite = {finite}").body
        epilogue = ast.parse(f"{target} = torch.where(_hp_finite, _hp_before, {target})").body
        self.changed += 1
        return ast.If(test=static, body=[*prologue, *node.body, *epilogue], orelse=[])


def _branch_free(cls: type) -> Callable[..., Any] | None:
    forward = cls.__dict__.get("forward")
    if forward is None or not inspect.isfunction(forward):
        return None
    # transformers wraps layer forwards for gradient checkpointing, which export (eval,
    # no grad) never uses: rewrite the wrapped function itself.
    forward = inspect.unwrap(forward)
    try:
        source = textwrap.dedent(inspect.getsource(forward))
    except (OSError, TypeError):
        return None
    if "isfinite" not in source or "super()" in source or forward.__closure__:
        return None
    tree = ast.parse(source)
    rewrite = _ClampRewrite()
    tree = rewrite.visit(tree)
    if not rewrite.changed:
        return None
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        return None
    func.decorator_list = []
    ast.fix_missing_locations(tree)
    namespace: dict[str, Any] = {}
    code = compile(tree, inspect.getsourcefile(forward) or "<halfprec>", "exec")
    exec(code, forward.__globals__, namespace)  # noqa: S102 (the class's own source)
    rewritten: Callable[..., Any] = namespace[func.name]
    return rewritten


def static_fp16_clamps(model: nn.Module) -> int:
    """Rebind, on ``model`` (a converted copy), every fp16 overflow-clamp branch; count.

    Only per-instance ``forward`` attributes change; classes stay as they are.
    """
    cache: dict[type, Callable[..., Any] | None] = {}
    count = 0
    for module in model.modules():
        cls = type(module)
        if cls not in cache:
            cache[cls] = _branch_free(cls) if cls.__module__.startswith("transformers.") else None
        func = cache[cls]
        if func is not None:
            module.forward = types.MethodType(func, module)  # type: ignore[method-assign]
            count += 1
    return count


def _plain(out: Any) -> Any:
    """ModelOutput (and other mappings) as plain dicts, recursively; tensors unchanged."""
    if isinstance(out, dict) or (hasattr(out, "keys") and hasattr(out, "__getitem__")):
        return {str(k): _plain(out[k]) for k in out.keys()}  # noqa: SIM118 (ModelOutput)
    if isinstance(out, (list, tuple)):
        return type(out)(_plain(v) for v in out) if type(out) in (list, tuple) else out
    return out


class PlainOutputs(nn.Module):
    """Wraps a transformers model so that its outputs are plain dicts of tensors.

    ``.pt2`` files are loaded without importing transformers, so they may name only plain
    containers in their output spec; the forward keeps the wrapped model's input names.
    """

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner


def plain_outputs(
    model: nn.Module, names: list[str], constants: dict[str, list[tuple[int, ...]]] | None = None
) -> nn.Module:
    """``model`` itself unless it is a transformers model; else :class:`PlainOutputs`
    with a ``forward`` taking exactly ``names`` as keyword-capable parameters. An input in
    ``constants`` (integer rows) reaches the model as those Python ints, as transformers'
    own exporter passes ``image_sizes``; the program still takes it and checks that it
    holds exactly those values."""
    constants = constants or {}
    if not type(model).__module__.startswith("transformers."):
        return model
    if not all(n.isidentifier() for n in names):
        return model
    params = ", ".join(names)
    passing = ", ".join(f"{n}=_fixed({n}, {n!r})" if n in constants else f"{n}={n}" for n in names)

    def fixed(value: torch.Tensor, name: str) -> list[tuple[int, ...]]:
        rows = constants[name]
        expected = torch.tensor(rows, dtype=value.dtype, device=value.device)
        torch._check_tensor_all(  # checked by the program: other values need another export
            value == expected, lambda: f"{name} must be {rows}: the program was exported for them"
        )
        return rows

    namespace: dict[str, Any] = {"_plain": _plain, "_fixed": fixed}
    exec(  # noqa: S102 (names are checked identifiers)
        f"def forward(self, {params}):\n    return _plain(self.inner({passing}))\n", namespace
    )
    wrapper = PlainOutputs(model)
    wrapper.forward = types.MethodType(namespace["forward"], wrapper)  # type: ignore[method-assign]
    return wrapper
