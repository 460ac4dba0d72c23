"""Which fp32 tensors of a converted model its recipe keeps in fp32: an upcast on one of
them is halfprec's choice, reported by the audit with the recipe field that governs it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from halfprec.convert.core import ConversionReport


@dataclass(frozen=True)
class RecipeKept:
    """Why the recipe keeps one tensor in fp32: the field, and how to change it."""

    what: str
    field: str
    how: str

    def computed(self) -> RecipeKept:
        """The reason for a tensor computed from this one alone."""
        if self.what.startswith("computed from "):
            return self
        return replace(self, what=f"computed from {self.what}")


_ISLAND_FIELDS = (("norm island", "norm_islands"), ("keep_fp32", "keep_fp32"))


def kept_by_recipe(model: nn.Module, report: ConversionReport) -> dict[int, RecipeKept]:
    """The fp32 tensors of a converted ``model`` that its recipe keeps in fp32, by storage:
    the small parameters and buffers of ``fp32_params_up_to`` and those of module islands
    (islands kept for their range are governed by no field and are left out)."""
    kept: dict[int, RecipeKept] = {}
    limit = report.recipe.fp32_params_up_to
    for name in report.small_fp32:
        tensor = _tensor(model, name)
        if tensor is not None:
            kept[tensor.untyped_storage().data_ptr()] = RecipeKept(
                f"the small parameter `{name}` (at most fp32_params_up_to={limit} values)",
                "fp32_params_up_to",
                "Recipe(fp32_params_up_to=0) makes every floating parameter half",
            )
    for island, reason in report.islands.items():
        field = next((f for start, f in _ISLAND_FIELDS if reason.startswith(start)), None)
        if field is None:
            continue
        module = model.get_submodule(island)
        for tname, tensor in (*module.named_parameters(), *module.named_buffers()):
            full = f"{island}.{tname}" if island else tname
            kept.setdefault(
                tensor.untyped_storage().data_ptr(),
                RecipeKept(f"`{full}` of the fp32 island `{island}`", field, f"{field} keeps it"),
            )
    return kept


def _tensor(model: nn.Module, name: str) -> torch.Tensor | None:
    owner, _, attr = name.rpartition(".")
    value = getattr(model.get_submodule(owner), attr, None)
    return value if isinstance(value, torch.Tensor) else None
