"""Facts about the machine a measurement ran on, printed next to every benchmark result."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from typing import Any

import torch

from halfprec.dtypes import device_support
from halfprec.fp32 import fp32_settings

# The CPU flags that decide half-precision speed on x86.
_FLAGS = {
    "amx_bf16": "AMX-BF16",
    "amx_fp16": "AMX-FP16",
    "avx512_bf16": "AVX512-BF16",
    "avx512_fp16": "AVX512-FP16",
}


@dataclass(frozen=True)
class MachineInfo:
    """Device name, half-precision features, threads and versions."""

    device: str
    name: str
    features: dict[str, bool]
    fp16_fast: bool
    bf16_fast: bool
    threads: int
    cpu_count: int
    torch_version: str
    python_version: str
    # the caller's fp32 settings, which fp32 is timed under (halfprec.fp32.fp32_settings)
    fp32: str = ""

    def summary(self) -> str:
        flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in self.features.items())
        fp32 = f"; fp32 timed with {self.fp32}" if self.fp32 else ""
        return (
            f"{self.device}: {self.name}; {flags}; torch {self.torch_version}, "
            f"{self.threads} threads of {self.cpu_count} CPUs{fp32}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def machine_info(device: str | torch.device = "cpu") -> MachineInfo:
    """Describe ``device`` through the one device table (:func:`halfprec.device_support`)."""
    sup = device_support(device)
    if torch.device(device).type == "cpu":
        features = {label: flag in sup.features for flag, label in _FLAGS.items()}
    else:
        features = {f: True for f in sup.features}
    return MachineInfo(
        device=str(device),
        name=sup.name,
        features=features,
        fp16_fast=sup.fp16_fast,
        bf16_fast=sup.bf16_fast,
        threads=torch.get_num_threads(),
        cpu_count=os.cpu_count() or 1,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        fp32=fp32_settings(device),
    )


def machine_key(device: str | torch.device = "cpu") -> dict[str, str | int]:
    """What a measurement on ``device`` depends on, for keying caches of it: the device and
    its name (CPU model, or GPU and compute capability), the half-precision features of
    the one device table, the architecture, torch's version, the thread count and the fp32
    settings."""
    sup = device_support(device)
    return {
        "device": str(torch.device(device)),
        "name": sup.name,
        "features": ",".join(sorted(sup.features)),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "fp32": fp32_settings(device),  # fp32's side of a probed ratio runs under them
    }
