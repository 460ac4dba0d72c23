"""halfprec: run PyTorch models in half precision (fp16/bf16) safely, checked against fp32."""

from __future__ import annotations

from .batch import Args
from .check import CheckResult, check
from .checkpoint import load, save
from .compare import Comparison, OutputMetrics, Tolerance, compare
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
    "compare",
    "Comparison",
    "OutputMetrics",
    "Tolerance",
    "check",
    "CheckResult",
    "save",
    "load",
    "Args",
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

# --- mixed-precision training (halfprec.train) ---
from .train.parallel import autocast_forward  # noqa: E402

__all__ += ["autocast_forward"]

# -- dtype leaks: runtime audit and static lint (issue #4) --------------------------------
from .audit import AuditReport, Leak, audit  # noqa: E402
from .lint import LintConfig, lint_paths, lint_source  # noqa: E402

__all__ += ["audit", "AuditReport", "Leak", "lint_paths", "lint_source", "LintConfig"]

# -- export: torch.export, TorchScript and ONNX artifacts (issue #7) ---------------------------
from .export import (  # noqa: E402
    Artifact,
    ArtifactInfo,
    ExportError,
    ExportResult,
    export,
    load_artifact,
)

__all__ += [
    "export",
    "ExportResult",
    "ExportError",
    "Artifact",
    "ArtifactInfo",
    "load_artifact",
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
