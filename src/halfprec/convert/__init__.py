"""Conversion to half precision: the recipe, the core verbs, and the behaviours a
converted module carries (boundaries, fills, op islands)."""

from halfprec.convert.core import (
    ConversionReport,
    conversion_report,
    convert,
    convert_,
    recipe_of,
)
from halfprec.convert.op_islands import OpRef
from halfprec.convert.recipe import Recipe, RecipeError

__all__ = [
    "ConversionReport",
    "OpRef",
    "Recipe",
    "RecipeError",
    "conversion_report",
    "convert",
    "convert_",
    "recipe_of",
]
