"""No library call changes its caller's model or global state: check, benchmark, audit and
export run the model in eval mode and give every ``training`` flag back; plots leave
matplotlib's backend alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec import BenchConfig, audit, benchmark, check, convert, export


class Recorder(nn.Module):
    """Records the ``training`` flag of every forward call it sees."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.seen: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(self.training)
        return self.drop(self.fc(x))


def _x() -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(0))


def _flags(model: nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


def _in_train_mode() -> Recorder:
    model = Recorder().train()
    model.fc.eval()  # a mixed state must come back exactly, not as model.train()
    return model


BEFORE = [True, False, True]


def test_check_runs_in_eval_and_restores_training_flags() -> None:
    model = _in_train_mode()
    result = check(model, _x(), "bf16", runs=1)
    assert model.seen and not any(model.seen)  # inside: every fp32 call in eval mode
    assert result.passed  # dropout off: half agrees with fp32
    assert _flags(model) == BEFORE


def test_benchmark_runs_in_eval_and_restores_training_flags() -> None:
    model = _in_train_mode()
    inside: list[list[bool]] = []
    result = benchmark(
        model,
        _x(),
        variants=["fp32", "halfprec-bf16"],
        bench=BenchConfig(warmup=1, runs=1, skip_slower_than=None),  # time bf16 even if slow
        progress=lambda *_: inside.append(_flags(model)),
    )
    assert inside and all(flags == [False] * 3 for flags in inside)
    assert result.get("halfprec-bf16").accurate
    assert _flags(model) == BEFORE


def test_audit_of_a_converted_model_restores_training_flags() -> None:
    half = convert(Recorder(), "bf16").train()
    half.fc.eval()
    seen_before = len(half.seen)
    audit(half, _x(), "bf16")
    assert half.seen[seen_before:] and not any(half.seen[seen_before:])
    assert _flags(half) == BEFORE


def test_export_runs_in_eval_and_restores_training_flags(tmp_path: Path) -> None:
    model = _in_train_mode()
    result = export(model, _x(), tmp_path / "m.ts", "bf16")
    assert model.seen and not any(model.seen)
    assert result.passed
    assert _flags(model) == BEFORE


def test_plots_leave_the_matplotlib_backend_alone(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    from halfprec import diagnose
    from halfprec.report.bench import write_chart
    from halfprec.report.diagnose import plot_diagnosis

    original = matplotlib.get_backend(auto_select=False)
    matplotlib.use("svg")
    try:
        model = Recorder().eval()
        plot_diagnosis(diagnose(model, _x(), "bf16"), tmp_path / "d.png")
        bench = benchmark(model, _x(), variants=["fp32"], bench=BenchConfig(warmup=1, runs=1))
        write_chart([bench], tmp_path / "b.png")
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(original or "agg")
    for name in ("d.png", "b.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
