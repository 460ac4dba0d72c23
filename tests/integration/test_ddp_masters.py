"""Master-weight mode under DDP and FSDP2, torchrun (gloo, 2 CPU processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from halfprec.train import MixedPrecision

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from masters_job import POISON_STEP, STEPS, build, global_batch, loss_of  # noqa: E402
from test_ddp import _torchrun  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("masters")
    _torchrun(str(HERE / "masters_job.py"), str(out), pythonpath=HERE)
    return {
        "outcomes": [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)],
        "tensors": [load_file(str(out / f"rank{r}.safetensors")) for r in (0, 1)],
    }


@pytest.fixture(scope="module")
def single() -> list[torch.Tensor]:
    """Master-weight mode in one process on the whole global batch."""
    model, optimizer = build()
    mp = MixedPrecision("bf16", "cpu")
    mp.use_master_weights(model, optimizer)
    for step in range(STEPS):
        mp.backward(loss_of(mp, model, *global_batch(step)))
        assert mp.step(optimizer).applied
    return [p.detach() for p in optimizer.param_groups[0]["params"]]


def _numbered(tensors: dict[str, torch.Tensor], prefix: str) -> list[torch.Tensor]:
    count = sum(1 for k in tensors if k.startswith(prefix))
    return [tensors[f"{prefix}{i}"] for i in range(count)]


def test_ddp_reduces_bf16_gradients_in_fp32_into_fp32_master_gradients(run: dict[str, Any]) -> None:
    for tensors in run["tensors"]:
        reduced = _numbered(tensors, "reduced.")
        assert reduced and {g.dtype for g in reduced} == {torch.float32}
        for i, got in enumerate(reduced):
            local = [tensors[f"local.{i}.{r}"] for r in (0, 1)]
            assert {g.dtype for g in local} == {torch.bfloat16}
            mean = local[0].float() / 2 + local[1].float() / 2  # summed in fp32, rounded once
            assert torch.equal(got, mean.to(torch.bfloat16).float())


def test_ddp_ranks_keep_identical_masters_and_track_one_process(
    run: dict[str, Any], single: list[torch.Tensor]
) -> None:
    ranks = [_numbered(t, "ddp.master.") for t in run["tensors"]]
    assert all(torch.equal(a, b) for a, b in zip(*ranks, strict=True))
    params = _numbered(run["tensors"][0], "ddp.param.")
    assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(params, ranks[0], strict=True))
    for got, want in zip(ranks[0], single, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=2e-3)  # bf16 gradients differ
    assert all(o["status"] == "applied" for o in run["outcomes"][0]["ddp_bf16"])


def test_an_fp16_overflow_on_one_rank_skips_everywhere_and_keeps_the_masters(
    run: dict[str, Any],
) -> None:
    for outcomes, tensors in zip(run["outcomes"], run["tensors"], strict=True):
        statuses = [o["status"] for o in outcomes["ddp_fp16"]]
        assert statuses == ["skipped" if s == POISON_STEP else "applied" for s in range(STEPS)]
        before, after = _numbered(tensors, "fp16.before."), _numbered(tensors, "fp16.after.")
        assert before and all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_fsdp2_keeps_its_fp32_shards_as_masters_and_computes_in_bf16(
    run: dict[str, Any], single: list[torch.Tensor]
) -> None:
    tensors = run["tensors"][0]
    assert bool(tensors["fsdp.dtypes"].all()) and not bool(tensors["fsdp.mode"].item())
    assert {o["compute_dtype"] for o in run["outcomes"][0]["fsdp_bf16"]} == {"torch.bfloat16"}
    for got, want in zip(_numbered(tensors, "fsdp.master."), single, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=2e-3)
