"""halfprec: run PyTorch models in half precision (fp16/bf16) safely, checked against fp32.

The verbs take a model, its example inputs and a :class:`Recipe` (or just a dtype),
in that order: ``convert(model, recipe)``, ``check(model, inputs, recipe)``,
``diagnose(model, inputs, recipe)``, ``tune(model, inputs, recipe)``,
``deploy(model, inputs, recipe)``, ... Everything else
(result types, helpers) is importable from its module, e.g.
``from halfprec.tune import TuneResult``.

The names below are imported on first use (PEP 562), so ``import halfprec`` and the
command line's ``--version``, ``--help``, usage errors and ``lint`` start without torch.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from halfprec._version import __version__

if TYPE_CHECKING:
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

# public name -> the module that defines it
_WHERE: dict[str, str] = {
    "convert": "halfprec.convert.core",
    "convert_": "halfprec.convert.core",
    "recipe_of": "halfprec.convert.core",
    "compare": "halfprec.compare",
    "check": "halfprec.check",
    "diagnose": "halfprec.diagnose",
    "preflight": "halfprec.preflight",
    "tune": "halfprec.tune",
    "audit": "halfprec.leaks.audit",
    "lint": "halfprec.leaks.lint",
    "benchmark": "halfprec.bench.runner",
    "deploy": "halfprec.bench.deploy",
    "export": "halfprec.export",
    "save": "halfprec.io.checkpoint",
    "load": "halfprec.io.checkpoint",
    "Recipe": "halfprec.convert.recipe",
    "Tolerance": "halfprec.tolerance",
    "BenchConfig": "halfprec.bench.results",
    "HalfprecError": "halfprec.errors",
    "DTypeError": "halfprec.errors",
    "InputsError": "halfprec.errors",
    "BrokenReferenceError": "halfprec.errors",
    "CheckpointError": "halfprec.errors",
    "MissingExtraError": "halfprec.errors",
}

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


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and then kept here."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'halfprec' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(ModuleType):
    """``halfprec`` itself. A submodule that shares a public name (``halfprec.check``,
    ``halfprec.convert``, ...) is not bound here when it is imported, so ``halfprec.check``
    stays the verb (found by ``__getattr__``) whichever was imported first."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name in _WHERE
            and isinstance(value, ModuleType)
            and value.__name__ == f"halfprec.{name}"
        ):
            return  # the submodule stays in sys.modules; the name means the verb
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
