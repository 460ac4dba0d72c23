"""Dtype names, numeric ranges, and what each device can run fast.

All parsing of dtype strings happens here (``parse_dtype``), and the one table of device
capabilities lives here (``device_support``), so the rest of halfprec never branches on
device names itself.
"""

from __future__ import annotations

import functools
import math
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from halfprec.errors import DeviceError, DTypeError
from halfprec.modules import finite_peak, first_line

__all__ = [
    "HALF_DTYPES",
    "DTypeChoice",
    "DeviceSupport",
    "DTypeLike",
    "parse_dtype",
    "dtype_name",
    "dtype_kind",
    "resolve_dtype",
    "candidate_dtypes",
    "is_auto",
    "device_support",
    "ensure_runnable",
    "fits_in",
    "overflow_bound",
    "range_of",
    "NumericRange",
    "resolve_device",
]

DTypeLike = str | torch.dtype

HALF_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)

_NAMES: dict[str, torch.dtype] = {
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "f32": torch.float32,
}

_SHORT: dict[torch.dtype, str] = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float64: "fp64",
}


def dtype_name(dtype: torch.dtype) -> str:
    """Short name used in reports and metadata: ``fp16``, ``bf16``, ``fp32``."""
    return _SHORT.get(dtype, str(dtype).removeprefix("torch."))


def dtype_kind(dtype: torch.dtype) -> str:
    """``float``, ``complex``, ``integer`` or ``bool``: what a value of ``dtype`` can mean."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_floating_point:
        return "float"
    return "complex" if dtype.is_complex else "integer"


def parse_dtype(value: DTypeLike, *, allow_fp32: bool = False) -> torch.dtype:
    """Turn ``"fp16"``/``"bf16"``/``torch.float16``... into a ``torch.dtype``.

    ``"auto"`` is not accepted here: use :func:`resolve_dtype`, which needs a device.
    """
    if isinstance(value, torch.dtype):
        dtype = value
    elif isinstance(value, str) and value.strip().lower() in _NAMES:
        dtype = _NAMES[value.strip().lower()]
    else:
        allowed = "fp16, bf16, auto" + (", fp32" if allow_fp32 else "")
        raise DTypeError(f"unknown dtype {value!r}; use one of: {allowed}")
    if dtype not in HALF_DTYPES and not (allow_fp32 and dtype == torch.float32):
        raise DTypeError(
            f"dtype {dtype_name(dtype)} is not a half dtype; use fp16 or bf16 (or auto)"
        )
    return dtype


@dataclass(frozen=True)
class NumericRange:
    """The representable range of a floating dtype."""

    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float


def range_of(dtype: torch.dtype) -> NumericRange:
    """Range facts of a floating dtype (fp16: max 65504, smallest normal 6.1e-5)."""
    info = torch.finfo(dtype)
    return NumericRange(
        max=float(info.max),
        smallest_normal=float(info.tiny),
        smallest_subnormal=float(info.smallest_normal) * float(info.eps),
        eps=float(info.eps),
    )


def cast_floating(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function that casts a floating tensor to ``dtype`` and leaves any other as it is
    (for :func:`halfprec.tree.map_tensors`)."""

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t

    return cast


def overflow_bound(dtype: torch.dtype) -> float:
    """The smallest magnitude a cast to ``dtype`` turns into inf: ``max`` plus half an ulp
    (fp16: 65520; a value between 65504 and 65520 rounds down to 65504). The maximum's
    mantissa is all ones, so a tie at the bound rounds to even: to inf."""
    info = torch.finfo(dtype)
    _, exponent = math.frexp(float(info.max))  # max = m * 2**exponent, 0.5 <= m < 1
    return float(info.max) + math.ldexp(float(info.eps), exponent - 2)


def fits_in(tensor: torch.Tensor, dtype: torch.dtype) -> bool:
    """The one range rule of halfprec: True when a cast of ``tensor`` to ``dtype`` turns no
    finite value into inf.

    - a finite value fits when its magnitude is below :func:`overflow_bound` (the largest
      finite value, and values that round down to it, fit; the next one does not);
    - inf and NaN always fit: the cast keeps them as they are (an fp32 tensor that already
      holds inf/NaN loses nothing more in half), and they say nothing about the range;
    - non-floating and empty tensors fit.

    Every range check (fp32 islands that widen, op islands' carried values, out-of-range
    parameters) asks this. It reads the tensor's values on the host: where a caller must
    not (a traced graph, a captured CUDA graph, an asynchronous device) it decides without
    calling it (:func:`halfprec.convert.swap.values_readable`).
    """
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return True
    return finite_peak(tensor) < overflow_bound(dtype)


@dataclass(frozen=True)
class DeviceSupport:
    """What one device can run, and how fast. The single table halfprec's policies read."""

    device: str
    name: str
    fp16_fast: bool
    bf16_fast: bool
    fp16_runs: bool
    bf16_runs: bool
    features: tuple[str, ...]
    bf16_compiles: bool = True  # inductor compiles bf16 here (on CUDA: sm80 and later)

    def fast(self, dtype: torch.dtype) -> bool:
        return self.fp16_fast if dtype == torch.float16 else self.bf16_fast

    def compiles(self, dtype: torch.dtype) -> bool:
        """Whether ``torch.compile`` compiles ``dtype`` here; inductor does not compile
        bf16 below CUDA compute capability 8.0 (T4, V100), where such a model runs eager."""
        return self.bf16_compiles if dtype == torch.bfloat16 else True

    def runs(self, dtype: torch.dtype) -> bool:
        return self.fp16_runs if dtype == torch.float16 else self.bf16_runs


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _cpu_support() -> DeviceSupport:
    flags = _cpu_flags()
    wanted = ("amx_bf16", "amx_fp16", "amx_tile", "avx512_bf16", "avx512_fp16", "avx512f")
    features = tuple(f for f in wanted if f in flags)
    is_arm = platform.machine().lower() in ("arm64", "aarch64")
    # Fast bf16: AMX-BF16 tiles or AVX512-BF16 dot products (oneDNN uses both).
    bf16_fast = "amx_bf16" in flags or "avx512_bf16" in flags
    # Fast fp16 GEMM on x86 needs AMX-FP16; AVX512-FP16 alone helps elementwise ops only.
    fp16_fast = "amx_fp16" in flags
    if is_arm:
        bf16_fast = bf16_fast or "bf16" in flags
        fp16_fast = fp16_fast or "fphp" in flags or "asimdhp" in flags
        features = features + tuple(f for f in ("bf16", "fphp", "asimdhp") if f in flags)
    return DeviceSupport(
        device="cpu",
        name=_cpu_name(),
        fp16_fast=fp16_fast,
        bf16_fast=bf16_fast,
        fp16_runs=True,
        bf16_runs=True,
        features=features,
    )


def _cuda_support(device: torch.device) -> DeviceSupport:
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    bf16 = major >= 8
    return DeviceSupport(
        device=str(device),
        name=f"{name} (compute capability {major}.{minor})",
        fp16_fast=major >= 7,
        bf16_fast=bf16,
        fp16_runs=True,
        bf16_runs=bf16 or torch.cuda.is_bf16_supported(including_emulation=True),
        features=(f"sm_{major}{minor}",),
        bf16_compiles=bf16,
    )


def device_support(device: str | torch.device = "cpu") -> DeviceSupport:
    """Capabilities of ``device``: which half dtypes run, and which have fast kernels."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return _cuda_support(dev)
    if dev.type == "cpu":
        return _cpu_support()
    return DeviceSupport(
        device=str(dev),
        name=dev.type,
        fp16_fast=True,
        bf16_fast=True,
        fp16_runs=True,
        bf16_runs=True,
        features=(),
    )


@dataclass(frozen=True)
class DTypeChoice:
    """A resolved compute dtype and the reason it was chosen."""

    dtype: torch.dtype
    reason: str

    @property
    def name(self) -> str:
        return dtype_name(self.dtype)


def resolve_dtype(value: DTypeLike, device: str | torch.device = "cpu") -> DTypeChoice:
    """Resolve ``"auto"`` (or an explicit dtype) for ``device``, saying why.

    ``auto`` prefers bf16 where it has fast kernels (its fp32-sized exponent cannot overflow
    where fp32 does not), then fp16 where only fp16 is fast, and bf16 where neither is.
    """
    if is_auto(value):
        sup = device_support(device)
        if sup.bf16_fast:
            flags = f" ({', '.join(sup.features)})" if sup.features else ""
            why = f"has fast bf16 kernels{flags}"
            return DTypeChoice(torch.bfloat16, f"auto: {sup.name} {why}; bf16 keeps fp32's range")
        if sup.fp16_fast:
            return DTypeChoice(torch.float16, f"auto: {sup.name} has fast fp16 but no fast bf16")
        return DTypeChoice(
            torch.bfloat16,
            f"auto: {sup.name} has no fast half kernels; bf16 halves memory but may not be faster",
        )
    dtype = parse_dtype(value)
    sup = device_support(device)
    speed = "fast kernels" if sup.fast(dtype) else "no fast kernels on this device"
    return DTypeChoice(dtype, f"requested {dtype_name(dtype)} ({speed})")


def is_auto(value: DTypeLike | None) -> bool:
    """True for the string ``"auto"`` (any case, surrounding spaces ignored)."""
    return isinstance(value, str) and value.strip().lower() == "auto"


def candidate_dtypes(
    requested: DTypeLike, device: str | torch.device = "cpu"
) -> tuple[torch.dtype, ...]:
    """The dtypes a search compares (``tune``, ``benchmark``): the requested one, or for
    ``"auto"`` every half dtype ``device`` can run, fp16 first (its tolerance is the
    stricter one). Where :func:`resolve_dtype` picks one dtype for ``"auto"`` from the
    device table, this is the ``"auto"`` of the commands that measure instead of guess."""
    if is_auto(requested):
        sup = device_support(device)
        return tuple(dt for dt in HALF_DTYPES if sup.runs(dt))
    return (parse_dtype(requested),)


def ensure_runnable(dtype: torch.dtype, device: str | torch.device = "cpu") -> None:
    """Raise :class:`DTypeError` when ``device`` cannot run a matmul in ``dtype``."""
    sup = device_support(device)
    if not sup.runs(dtype):
        raise DTypeError(
            f"{sup.name} cannot run {dtype_name(dtype)}; use --dtype fp16 (or auto) on this device"
        )
    try:
        probe = torch.ones(2, 2, dtype=dtype, device=device)
        torch.mm(probe, probe)
    except RuntimeError as exc:
        other = "fp16" if dtype == torch.bfloat16 else "bf16"
        raise DTypeError(
            f"{sup.name} cannot run {dtype_name(dtype)} ({first_line(exc)}); "
            f"use --dtype {other} or auto"
        ) from None


def resolve_device(device: str | torch.device | None) -> torch.device:
    """Parse a device name and check that it exists here (``None``: cuda if present, else cpu)."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise DeviceError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "meta":
        raise DeviceError(
            f"device {device!r} holds no data, so nothing can be run or compared on it; "
            "use cpu, cuda or cuda:N"
        )
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device {device!r} is not available here (no CUDA); use --device cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {device!r} does not exist: {torch.cuda.device_count()} CUDA devices"
            )
    elif dev.type != "cpu":  # mps, xpu, ...: a device kind torch knows; is it here?
        try:
            torch.empty(0, device=dev)
        except Exception:  # RuntimeError, AssertionError or ModuleNotFoundError by backend
            raise DeviceError(
                f"device {device!r} is not available here (this machine or torch build has "
                f"no {dev.type} device); use --device cpu"
                + (" or cuda" if torch.cuda.is_available() else "")
            ) from None
    return dev
