"""Conversion to half precision: the core verbs, module boundaries, and tuned policies."""

from halfprec.convert.core import (
    ConversionReport,
    ConvertConfig,
    conversion_report,
    convert,
    convert_,
)
from halfprec.convert.op_islands import OpRef
from halfprec.convert.policy import Policy

__all__ = [
    "ConversionReport",
    "ConvertConfig",
    "OpRef",
    "Policy",
    "conversion_report",
    "convert",
    "convert_",
]
