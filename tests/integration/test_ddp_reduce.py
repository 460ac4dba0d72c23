"""DDP's gradient all-reduce in master-weight mode: ``fp32_reduce_hook`` against DDP's
default, torchrun (gloo, 3 CPU processes).

With 2 ranks the two agree: each share ``g / 2`` is exact in bf16 and the one bf16 addition
rounds the exact sum once, as the hook does. From 3 ranks a bf16 all-reduce rounds each
share and each partial sum; the hook sums in fp32 and rounds once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from reduce_job import rank_gradient  # noqa: E402
from test_ddp import _torchrun  # noqa: E402

pytestmark = pytest.mark.slow
WORLD = 3


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, torch.Tensor]]:
    out = tmp_path_factory.mktemp("reduce")
    _torchrun(str(HERE / "reduce_job.py"), str(out), pythonpath=HERE, nproc=WORLD)
    return [load_file(str(out / f"rank{r}.safetensors")) for r in range(WORLD)]


def _mean_rounded_once() -> torch.Tensor:
    exact = sum(rank_gradient(r, WORLD).double() for r in range(WORLD)) / WORLD
    return exact.to(torch.bfloat16).float()  # type: ignore[union-attr]


def test_the_fp32_hook_rounds_the_mean_of_three_ranks_once(
    ranks: list[dict[str, torch.Tensor]],
) -> None:
    want = _mean_rounded_once()
    for tensors in ranks:
        assert int(tensors["world"]) == WORLD
        assert tensors["hook"].dtype == torch.float32
        assert torch.equal(tensors["hook"], want)


def test_ddp_default_bf16_reduction_rounds_differently(
    ranks: list[dict[str, torch.Tensor]],
) -> None:
    """The control: without the hook the same gradients reduce to other values, so the
    test above would fail if the hook were not applied."""
    want = _mean_rounded_once()
    for tensors in ranks:
        assert torch.equal(tensors["default"], ranks[0]["default"])
        differ = int((tensors["default"] != want).sum())
        assert differ > 0.01 * want.numel(), differ
