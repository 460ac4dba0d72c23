"""A model compiled by another runtime, called like the torch model it came from.

:class:`FlatIO` is the plumbing: the model's inputs as one flat list of tensors in a fixed
order (the order the runtime's graph takes them), and the runtime's flat outputs put back
into the model's own output structure (tensor, tuple, dict, ``ModelOutput``), read from
the model's output on the example batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.batch import Args, Batch, call
from halfprec.errors import HalfprecError, InputsError
from halfprec.export.capture import forward_params, named_inputs
from halfprec.tree import flatten, map_tensors

__all__ = ["FlatIO", "RuntimeModule"]

Run = Callable[[list[torch.Tensor]], list[torch.Tensor]]


def _fill(template: Any, tensors: list[torch.Tensor]) -> Any:
    """``template`` with its tensors replaced, in :func:`~halfprec.tree.flatten` order."""
    it: Iterator[torch.Tensor] = iter(tensors)
    return map_tensors(lambda _: next(it), template)


@dataclass(frozen=True)
class FlatIO:
    """How one model's calls become flat tensor lists and back.

    ``params``: the forward parameters positional inputs bind to; ``inputs`` and
    ``outputs``: the dotted tensor paths in the runtime's order; ``named``: the example
    batch as keyword inputs (its non-tensor values are fixed in the graph); ``template``:
    the model's output on the example batch, whose structure every call returns."""

    params: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    named: dict[str, Any]
    template: Any

    @classmethod
    def of(cls, model: nn.Module, batch: Batch) -> FlatIO:
        """``model``'s calls on ``batch`` (a Hugging Face model with its KV cache on: the
        cache-free copy :func:`~halfprec.export.hf.without_cache` makes, as export does)."""
        pending = cls.inputs_of(model, batch)
        with torch.no_grad():
            return pending.with_output(call(model, pending.named))

    @classmethod
    def inputs_of(cls, model: nn.Module, batch: Batch) -> FlatIO:
        """The input side of :meth:`of`, without calling ``model``: no outputs yet (a
        tracing converter's own call of :class:`Flat` gives them: :meth:`with_output`)."""
        params = forward_params(model)
        named = named_inputs(batch, params)
        return cls(params, tuple(flatten(named)), (), named, None)

    def with_output(self, template: Any) -> FlatIO:
        """These inputs with ``template``, the model's output on the example batch."""
        return replace(self, outputs=tuple(flatten(template)), template=template)

    @property
    def example(self) -> list[torch.Tensor]:
        return list(flatten(self.named).values())

    def flat_inputs(self, batch: Batch) -> list[torch.Tensor]:
        """``batch``'s tensors in the graph's order; an error naming the difference when
        the batch has other inputs than the example."""
        got = flatten(named_inputs(batch, self.params))
        if tuple(got) != self.inputs:
            raise InputsError(
                f"this runtime module was built for inputs {list(self.inputs)}, got "
                f"{list(got)}; call it with the inputs of the example batch"
            )
        return list(got.values())

    def rebuild(self, tensors: list[torch.Tensor]) -> Any:
        """The runtime's flat outputs in the model's output structure."""
        if len(tensors) != len(self.outputs):
            raise RuntimeError(
                f"the runtime returned {len(tensors)} outputs, the model {len(self.outputs)}"
            )
        return _fill(self.template, tensors)


class Flat(nn.Module):
    """``model`` taking the flat input list and returning the flat output tuple: the form
    a tracing converter (OpenVINO's) sees, so that no structure is left to its guessing.
    ``output`` is the model's own output of the last call (None before one): the template
    that the converter's tracing call gives without another call of the model."""

    def __init__(self, model: nn.Module, io: FlatIO) -> None:
        super().__init__()
        self.model, self.io = model, io
        self.output: Any = None

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = call(self.model, _fill(self.io.named, list(tensors)))
        self.output = out
        return tuple(flatten(out).values())


class RuntimeModule(nn.Module):
    """A model compiled by ``runtime`` (``"openvino"``, ``"onnxruntime"``), called like the
    torch model: the same inputs (tuple, keywords, tensor), torch tensors back in the
    model's output structure. ``precision``: what the runtime computes in, as it reports
    it (OpenVINO's effective inference precision). It holds no torch parameters.

    In-process only: it cannot be pickled or copied. :meth:`save` writes the runtime's own
    file (OpenVINO IR ``.xml`` + ``.bin``, or ``.onnx``), which that runtime loads with its
    own API and which returns the flat outputs named :attr:`output_names`."""

    def __init__(
        self,
        runtime: str,
        precision: str,
        run: Run,
        io: FlatIO,
        save: Callable[[Path], Path],
        keep: tuple[Any, ...] = (),
    ) -> None:
        super().__init__()
        self.runtime, self.precision = runtime, precision
        self._run, self._io, self._save = run, io, save
        self._keep = keep  # what the compiled graph needs alive (shared weights, temp files)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._io.inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._io.outputs

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        batch = Args(args, kwargs) if kwargs else args
        return self._io.rebuild(self._run(self._io.flat_inputs(batch)))

    def save(self, path: str | Path) -> Path:
        """Write the runtime's graph to ``path`` (``.xml`` for OpenVINO, ``.onnx`` for
        onnxruntime); returns the path written."""
        return self._save(Path(path))

    def extra_repr(self) -> str:
        return f"runtime={self.runtime}, precision={self.precision}"

    def _refuse(self) -> HalfprecError:
        return HalfprecError(
            f"a RuntimeModule ({self.runtime}) runs in this process only and cannot be "
            "copied or pickled; save its graph with .save(path), or run deploy again"
        )

    def __deepcopy__(self, memo: Any) -> RuntimeModule:
        raise self._refuse()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise self._refuse()
