"""The ``+compile`` variants' CPU recipe: cached by inductor, warmed in the mode it is called
in, the caller's inductor settings kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._inductor.config as inductor_config
from torch import nn
from torch._dynamo.utils import counters

from halfprec.bench.variants import Variant, build_variant

SRC = Path(__file__).resolve().parents[2] / "src"
NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")
COMPILED = Variant("fp32", compiled=True)


class Marked(nn.Module):
    """A Linear with non-persistent buffers registered the way transformers registers
    BERT's ``position_ids``: ``nn.Buffer(..., persistent=False)``."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(16, 16)
        for i, name in enumerate(NAMES):
            setattr(self, name, nn.Buffer(torch.full((16,), float(i)), persistent=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + sum(getattr(self, n) for n in NAMES)


X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))


def _caches() -> dict[str, int]:
    fx = {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}
    aot = {k: v for k, v in counters["aot_autograd"].items() if k.startswith("autograd_cache")}
    return {**fx, **aot}


def _grew(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


@pytest.mark.slow
def test_cpu_compile_is_cached_by_inductor_and_reused_for_other_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one compile of one Linear, then a fresh dynamo state: inductor's caches hand back
    # the graph, run on the new model's own weights
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    settings = (inductor_config.freezing, inductor_config.cpp.weight_prepack)
    start = _caches()
    build_variant(Marked(0), COMPILED)(X)
    stored = _caches()
    assert _grew(start, stored) == {
        "fxgraph_cache_miss": 1,
        "autograd_cache_miss": 1,
        "autograd_cache_saved": 1,
    }
    torch._dynamo.reset()
    other = Marked(1)
    out = build_variant(other, COMPILED)(X)
    # nothing traced by AOTAutograd or compiled by inductor again
    assert _grew(stored, _caches()) == {"autograd_cache_hit": 1, "fxgraph_cache_hit": 1}
    with torch.no_grad():
        torch.testing.assert_close(out, other(X))  # its own weights, not the first model's
        assert not torch.allclose(out, Marked(0)(X))
    assert (inductor_config.freezing, inductor_config.cpp.weight_prepack) == settings
    torch._dynamo.reset()


@pytest.mark.slow
def test_a_compiled_variant_warmed_like_bench_does_not_compile_again_when_called() -> None:
    # bench and deploy warm a variant under inference_mode; the user then calls it plainly
    torch._dynamo.reset()
    module = build_variant(Marked(0), COMPILED)
    with torch.inference_mode():
        module(X)
    graphs = counters["stats"]["unique_graphs"]
    out = module(X)
    with torch.no_grad():
        module(X)
    assert counters["stats"]["unique_graphs"] == graphs
    assert not out.is_inference() and not out.requires_grad
    out.add_(1)  # an ordinary tensor: the caller may change it in place
    torch._dynamo.reset()


_CHILD = """
import json, sys, torch
from torch._dynamo.utils import counters
sys.path.insert(0, sys.argv[1])
from test_variants import NAMES, COMPILED, Marked, X, _caches
from halfprec.bench.variants import build_variant
build_variant(Marked(0), COMPILED)(X)
print(json.dumps({"order": list(set(NAMES)), **_caches()}))
"""


def _compile_in_child(seed: str, cache: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONHASHSEED=seed, TORCHINDUCTOR_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    here = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, here], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


@pytest.mark.slow
def test_a_new_process_loads_the_compile_whatever_its_string_hash_seed(tmp_path: Path) -> None:
    # a frozen graph held a set of the non-persistent buffers' names, which the FX graph
    # cache's key pickled in hash order: a new key, and a full compile, in every process
    first = _compile_in_child("1", tmp_path)
    second = _compile_in_child("2", tmp_path)
    assert first["order"] != second["order"]  # the seeds order the names differently
    assert first.get("autograd_cache_miss") == 1 and "autograd_cache_hit" not in first
    assert second.get("autograd_cache_hit") == 1 and "autograd_cache_miss" not in second


@pytest.mark.parametrize(
    ("variant", "frozen"),
    [
        (COMPILED, False),
        (Variant("naive", torch.bfloat16, compiled=True), True),
        (Variant("halfprec", torch.float16, compiled=True), True),
    ],
    ids=["fp32", "naive-bf16", "halfprec-fp16"],
)
def test_on_cpu_half_variants_compile_frozen_and_fp32_unfrozen(
    variant: Variant, frozen: bool
) -> None:
    """fp32 unfrozen (inductor caches it); fp16/bf16 frozen, the recipe their CPU speed was
    measured with (oneDNN's prepacked half GEMMs)."""
    built = build_variant(Marked(0).eval(), variant)
    assert built.freezing is frozen
