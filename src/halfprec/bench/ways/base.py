"""The protocol of a way of running a model: :class:`Way`.

A way is what a bench variant's kind names (``fp32``, ``naive``, ``autocast``,
``halfprec``, ``openvino``, ...): how to build a ready-to-call module from the caller's
model and recipe, in which dtypes, what it needs to be built, whether deploy may choose
it, and how the built module is saved. Compiling is not a way of its own: any way that
runs in torch and says ``compilable`` gets a ``+compile`` (and on CPU ``+autotune``) twin,
compiled by :func:`halfprec.bench.variants.compile_for_device`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from halfprec.convert.recipe import Recipe
from halfprec.dtypes import dtype_name

TORCH = "torch"


class Way:
    """One way of running a model. A subclass sets the class attributes and implements
    :meth:`build`; registering an instance (:func:`halfprec.bench.ways.register`, or a line
    in that module's built-in list) makes bench, deploy and the CLI offer it.

    - ``name``: the kind in variant names (``halfprec`` in ``halfprec-bf16+compile``);
    - ``summary``: one line for ``halfprec bench --list-variants``;
    - ``dtypes``: the precisions it computes in (the variant's dtype is one of them);
    - ``runs_in``: what runs the built module: ``"torch"``, or another runtime's name (such a
      module is judged by deploy's runtime rule: it must beat the torch choice by its
      spread, and bench measures no memory for it);
    - ``needs_batch``: it is built by tracing an example batch (``build`` gets one);
    - ``compilable``: it runs in torch and takes ``+compile``;
    - ``choosable``: deploy and bench's "auto would choose" may pick it (and bench
      ``--compile`` compiles its twin without ``--variants``);
    - ``bench_default``: ``halfprec bench`` runs it without ``--variants``;
    - ``saving``: how the built module is saved, in a line.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    dtypes: ClassVar[tuple[torch.dtype, ...]]
    runs_in: ClassVar[str] = TORCH
    needs_batch: ClassVar[bool] = False
    compilable: ClassVar[bool] = True
    choosable: ClassVar[bool] = False
    bench_default: ClassVar[bool] = False
    saving: ClassVar[str]

    def build(self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: Any) -> nn.Module:
        """A module that runs ``model`` this way in ``dtype``. ``model`` is the caller's
        copy, in eval mode, and may be changed; ``recipe`` carries the caller's islands
        (its dtype is not ``dtype``'s to decide); ``batch`` is the example batch (None
        unless ``needs_batch``)."""
        raise NotImplementedError

    def unavailable(self, dtype: torch.dtype, device: torch.device | str) -> str | None:
        """Why this way cannot run ``dtype`` on ``device``, in one line (None: it can).
        A torch way leaves the device's half support to bench's probe."""
        return None

    def refuse_dtype(self, dtype: torch.dtype) -> str:
        """The one line that refuses a variant of this way in ``dtype`` (not in ``dtypes``)."""
        offered = " or ".join(map(dtype_name, self.dtypes))
        return f"variant {self.name} needs {offered}, got {dtype}"

    @property
    def runtime(self) -> bool:
        """Run by another runtime than torch."""
        return self.runs_in != TORCH
