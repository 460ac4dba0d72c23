"""halfprec: run PyTorch models in half precision (fp16/bf16) safely, checked against fp32."""

from __future__ import annotations

from halfprec._version import __version__
from halfprec.batch import Args
from halfprec.check import CheckResult, check
from halfprec.compare import Comparison, OutputMetrics, Tolerance, compare
from halfprec.convert.core import (
    ConversionReport,
    ConvertConfig,
    conversion_report,
    convert,
    convert_,
)
from halfprec.convert.policy import Policy
from halfprec.dtypes import DeviceSupport, DTypeChoice, device_support, parse_dtype, resolve_dtype
from halfprec.errors import (
    BrokenReferenceError,
    CheckpointError,
    DTypeError,
    HalfprecError,
    InputsError,
    MissingExtraError,
    ModelSpecError,
)
from halfprec.io.checkpoint import load, save

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
    "BrokenReferenceError",
    "CheckpointError",
    "MissingExtraError",
]

# --- mixed-precision training (halfprec.train) ---
from halfprec.train.parallel import autocast_forward  # noqa: E402

__all__ += ["autocast_forward"]

# -- dtype leaks: runtime audit and static lint (issue #4) --------------------------------
from halfprec.leaks.audit import AuditReport, Leak, audit  # noqa: E402
from halfprec.leaks.lint import LintConfig, lint_paths, lint_source  # noqa: E402

__all__ += ["audit", "AuditReport", "Leak", "lint_paths", "lint_source", "LintConfig"]

# -- export: torch.export, TorchScript and ONNX artifacts (issue #7) ---------------------------
from halfprec.export import (  # noqa: E402
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
from halfprec.diagnose import Diagnosis, Divergence, ModuleDiagnosis, diagnose, naive_half  # noqa: E402
from halfprec.preflight import Finding, Preflight, preflight  # noqa: E402
from halfprec.tune import (  # noqa: E402
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
from halfprec.bench.runner import (  # noqa: E402
    BenchConfig,
    BenchResult,
    MeasuredChoice,
    VariantResult,
    benchmark,
    choose_dtype_by_measurement,
    fastest_variant,
)
from halfprec.bench.variants import Variant  # noqa: E402

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
