"""Real training on scikit-learn's bundled digits data: AMP and bf16 weights accuracy, and
loss scaling."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from train_digits import UNDERFLOW_WEIGHT, train_digits  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny matmuls: one intra-op thread is faster than fighting over shared cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def fp32_accuracy() -> float:
    torch.set_num_threads(1)
    return train_digits("fp32").accuracy


@pytest.mark.parametrize("precision", ["bf16", "fp16", "bf16-weights"])
def test_amp_accuracy_within_one_point_of_fp32(precision: str, fp32_accuracy: float) -> None:
    result = train_digits(precision)
    assert fp32_accuracy > 0.9  # the model really learned the task
    assert abs(result.accuracy - fp32_accuracy) <= 0.01
    assert result.skipped_steps <= 2


def test_fp16_without_scaling_underflows_and_halfprec_learns() -> None:
    plain = train_digits("fp16", scale_loss=False, loss_weight=UNDERFLOW_WEIGHT)
    scaled = train_digits("fp16", loss_weight=UNDERFLOW_WEIGHT)
    # Every gradient underflowed to zero in fp16: Adam never moved a weight.
    assert not plain.weights_changed
    assert plain.accuracy < 0.2  # chance level for 10 classes
    assert scaled.weights_changed
    assert scaled.accuracy > 0.9
