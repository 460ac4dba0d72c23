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

# -- diagnose, preflight, tune (issue #3) ---------------------------------------------------
from .diagnose import Diagnosis, Divergence, ModuleDiagnosis, diagnose, naive_half  # noqa: E402
from .preflight import Finding, Preflight, preflight  # noqa: E402
from .tune import (  # noqa: E402
    ToleranceUnreachableError,
    TuneConfig,
    TuneReport,
    TuneResult,
    tune,
)

__all__ += [
    "diagnose",
    "naive_half",
    "Diagnosis",
    "Divergence",
    "ModuleDiagnosis",
    "preflight",
    "Preflight",
    "Finding",
    "tune",
    "TuneConfig",
    "TuneReport",
    "TuneResult",
    "ToleranceUnreachableError",
]
