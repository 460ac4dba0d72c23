"""halfprec: run PyTorch models in half precision (fp16/bf16) safely, checked against fp32."""

from __future__ import annotations

from .convert import (
    ConversionReport,
    ConvertConfig,
    conversion_report,
    convert,
    convert_,
)
from .dtypes import DeviceSupport, DTypeChoice, device_support, parse_dtype, resolve_dtype
from .errors import (
    CheckpointError,
    DTypeError,
    HalfprecError,
    InputsError,
    MissingExtraError,
    ModelSpecError,
)
from .policy import Policy

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "convert",
    "convert_",
    "ConvertConfig",
    "ConversionReport",
    "conversion_report",
    "Policy",
    "DeviceSupport",
    "DTypeChoice",
    "device_support",
    "parse_dtype",
    "resolve_dtype",
    "HalfprecError",
    "DTypeError",
    "ModelSpecError",
    "InputsError",
    "CheckpointError",
    "MissingExtraError",
]

# --- bench (issue #6): speed, memory and accuracy of each variant, measured auto ---------
from .bench import (  # noqa: E402
    BenchConfig,
    BenchResult,
    MeasuredChoice,
    VariantResult,
    benchmark,
    choose_dtype_by_measurement,
    fastest_variant,
)
from .bench_variants import Variant  # noqa: E402

__all__ += [
    "benchmark",
    "BenchConfig",
    "BenchResult",
    "VariantResult",
    "Variant",
    "MeasuredChoice",
    "fastest_variant",
    "choose_dtype_by_measurement",
]
