"""The ``+compile`` variants' CPU recipe: frozen, cached by inductor, the caller's state kept."""

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

from halfprec.bench.variants import COMPILE_RECIPES, CompileRecipe, Variant, build_variant

SRC = Path(__file__).resolve().parents[2] / "src"
NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")


class Marked(nn.Module):
    """A Linear with non-persistent buffers registered the way transformers registers
    BERT's ``position_ids``: ``nn.Buffer(..., persistent=False)``, which marks the tensor."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(16, 16)
        for i, name in enumerate(NAMES):
            setattr(self, name, nn.Buffer(torch.full((16,), float(i)), persistent=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + sum(getattr(self, n) for n in NAMES)


X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))


def _fx_cache() -> dict[str, int]:
    return {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}


def test_recipe_rejects_prepack_off_without_freezing() -> None:
    with pytest.raises(ValueError, match=r"weight_prepack=False\) applies to frozen graphs"):
        CompileRecipe(weight_prepack=False)
    assert COMPILE_RECIPES["cpu"].inductor_options == {
        "freezing": True,
        "cpp.weight_prepack": False,
    }
    assert COMPILE_RECIPES["cuda"].inductor_options == {}  # nothing patched on CUDA


def test_a_compiled_variant_keeps_state_dict_and_the_callers_buffers() -> None:
    model = Marked(0)
    built = build_variant(model, Variant("fp32", compiled=True))  # compiles lazily: no call
    assert set(built.compiled._orig_mod.state_dict()) == set(model.state_dict())
    assert set(model.state_dict()) == {"fc.weight", "fc.bias"}  # buffers non-persistent
    assert all(getattr(model, n).persistent is False for n in NAMES)  # the caller's marks


@pytest.mark.slow
def test_cpu_compile_is_stored_by_inductor_and_reused_for_other_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one frozen compile (a second of inductor work for one Linear), then a fresh dynamo
    # state: the FX graph cache hands back the graph, bound to the new model's weights
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    prepack, freezing = inductor_config.cpp.weight_prepack, inductor_config.freezing
    start = _fx_cache()
    first = build_variant(Marked(0), Variant("fp32", compiled=True))
    first(X)
    stored = _fx_cache()
    assert stored.get("fxgraph_cache_bypass", 0) == start.get("fxgraph_cache_bypass", 0)
    assert stored.get("fxgraph_cache_miss", 0) == start.get("fxgraph_cache_miss", 0) + 1
    torch._dynamo.reset()
    other = Marked(1)
    out = build_variant(other, Variant("fp32", compiled=True))(X)
    assert _fx_cache().get("fxgraph_cache_hit", 0) == stored.get("fxgraph_cache_hit", 0) + 1
    with torch.no_grad():
        torch.testing.assert_close(out, other(X))  # its own weights, not the first model's
        assert not torch.allclose(out, Marked(0)(X))
    # the caller's inductor settings are as they were
    assert (inductor_config.cpp.weight_prepack, inductor_config.freezing) == (prepack, freezing)
    torch._dynamo.reset()


_CHILD = """
import json, sys, torch
from torch._dynamo.utils import counters
sys.path.insert(0, sys.argv[1])
from test_variants import NAMES, Marked, X
from halfprec.bench.variants import Variant, build_variant
build_variant(Marked(0), Variant("fp32", compiled=True))(X)
print(json.dumps({"order": list(set(NAMES)), **counters["inductor"]}))
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
def test_a_new_process_reuses_the_compile_whatever_its_string_hash_seed(tmp_path: Path) -> None:
    # the frozen graph once held a set of the non-persistent buffers' names, which the
    # cache key pickled in hash order: a new key, and a new compile, in every process
    first = _compile_in_child("1", tmp_path)
    second = _compile_in_child("2", tmp_path)
    assert first["order"] != second["order"]  # the seeds order the names differently
    assert first.get("fxgraph_cache_miss") == 1 and "fxgraph_cache_hit" not in first
    assert second.get("fxgraph_cache_hit") == 1 and "fxgraph_cache_miss" not in second
