"""halfprec: run PyTorch models in half precision (fp16/bf16) safely, checked against fp32.

The verbs take a model, its example inputs and a :class:`Recipe` (or just a dtype),
in that order: ``convert(model, recipe)``, ``check(model, inputs, recipe)``,
``diagnose(model, inputs, recipe)``, ``tune(model, inputs, recipe)``,
``deploy(model, inputs, recipe)``, ... Everything else
(result types, helpers) is importable from its module, e.g.
``from halfprec.tune import TuneResult``.
"""

from __future__ import annotations

from halfprec._version import __version__
from halfprec.bench.deploy import deploy
from halfprec.bench.results import BenchConfig
from halfprec.bench.runner import benchmark
from halfprec.check import check
from halfprec.compare import compare
from halfprec.convert.core import convert, convert_, recipe_of
from halfprec.convert.recipe import Recipe
from halfprec.diagnose import diagnose
from halfprec.errors import (
    BrokenReferenceError,
    CheckpointError,
    DTypeError,
    HalfprecError,
    InputsError,
    MissingExtraError,
)
from halfprec.export import export
from halfprec.io.checkpoint import load, save
from halfprec.leaks.audit import audit
from halfprec.leaks.lint import lint
from halfprec.preflight import preflight
from halfprec.tolerance import Tolerance
from halfprec.tune import tune

__all__ = [
    "__version__",
    # verbs
    "convert",
    "convert_",
    "compare",
    "check",
    "diagnose",
    "preflight",
    "tune",
    "audit",
    "lint",
    "benchmark",
    "deploy",
    "export",
    "save",
    "load",
    "recipe_of",
    # configuration
    "Recipe",
    "Tolerance",
    "BenchConfig",
    # errors
    "HalfprecError",
    "DTypeError",
    "InputsError",
    "BrokenReferenceError",
    "CheckpointError",
    "MissingExtraError",
]
