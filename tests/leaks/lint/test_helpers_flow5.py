"""Round twenty's recall rules (issue #41), each with small models of our own: the misses
of blind freezes O and P, fixed for their class. Each is a value that leaves the
expression that made it by a way the walk did not follow:

- returned from a ``forward`` that takes a ``TensorDict`` (``.escapes``);
- through a function that returns its argument, ``nn.init.normal_(t)`` (``.escapes``);
- through ``scatter_`` of a number, which overwrites and counts nothing (``.escapes``);
- kept on ``self`` by one class and read by a method of a related class (``.family``);
- held by an object a class's ``from_*`` constructor builds (``.escapes``);
- kept on ``self`` by a ``forward`` that returns nothing (``.escapes``);
- host data ``torch.tensor`` makes floating: a list filled with divisions, a NumPy array
  made ``float32`` (``.hostfloats``).

Every "reported" test fails on main before the round (a679363); the silent siblings are
asserted beside them, and the dtype each test claims is checked in torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tests.support.lint_models import HEAD_F, Snippets, package

from halfprec.leaks.lint import lint_paths

LINT = Snippets()
LINT_F = Snippets(HEAD_F)


def _found(pkg: Path) -> list[tuple[str, int, str]]:
    return sorted((Path(f.path).name, f.line, f.code) for f in lint_paths([pkg]).findings)


# A forward that takes a TensorDict: its returned tuple is the model's output.
_STATE = """
from tensordict import TensorDict


class Start(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d

    def forward(self, td: TensorDict):
        costs = td["costs"]
        rows = torch.zeros(costs.shape[0], costs.shape[1], self.d, device=costs.device)
        cols = torch.rand(costs.shape[0], costs.shape[2], self.d, device=costs.device)
        return rows, cols, costs
"""


def test_factories_returned_in_a_tuple_from_a_tensordict_forward_leak() -> None:
    assert LINT.lines(_STATE) == [12, 13]


def test_a_module_of_numbers_only_stays_silent() -> None:
    body = _STATE.replace("td: TensorDict", "n: int").replace('costs = td["costs"]', "costs = n")
    assert LINT.lines(body) == []


# In-place initialisers of torch.nn.init return the tensor they fill.
_INIT = """
class Memory(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.n, self.d = n, d
        self.embed = nn.Embedding(n, d)

    def forward(self, ids):
        e = self.embed(ids)
        start = INIT(torch.zeros(self.n, self.d)).repeat(e.shape[0], 1, 1)
        return torch.cat([e, start], 1)
"""


def test_a_factory_filled_by_an_initialiser_leaks() -> None:
    assert nn_init_returns_its_argument()
    for init in ("nn.init.xavier_uniform_", "torch.nn.init.normal_", "nn.init.orthogonal_"):
        assert LINT.lines(_INIT.replace("INIT", init)) == [10], init


def nn_init_returns_its_argument() -> bool:
    t = torch.zeros(3, 4)
    return torch.nn.init.xavier_uniform_(t) is t and t.dtype == torch.float32


def test_an_initialised_factory_cast_before_it_meets_half_stays_silent() -> None:
    body = _INIT.replace("INIT", "nn.init.normal_").replace("start], 1)", "start.to(e.dtype)], 1)")
    assert LINT.lines(body) == []


def test_a_factory_given_to_an_unknown_function_stays_unknown() -> None:
    assert LINT.lines(_INIT.replace("INIT", "fill_somehow")) == []


# scatter_ of a number overwrites: a one-hot fp32 mask, no count.
_ONE_HOT = """
class Pick(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.n = n
        self.score = nn.Linear(d, n)

    def forward(self, x, pos):
        logits = self.score(x)
        mask = torch.zeros(x.shape[0], self.n, device=x.device).scatter_(1, pos[:, None], 1)
        return logits - 1e4 * mask
"""


def test_a_one_hot_mask_made_by_scatter_meets_half_logits_and_leaks() -> None:
    assert LINT.lines(_ONE_HOT) == [10]
    model = LINT.model(_ONE_HOT, "Pick")(4, 3).half()
    out = model(torch.randn(2, 4).half(), torch.tensor([0, 2]))
    assert out.dtype == torch.float32


def test_a_counter_made_by_scatter_add_stays_silent() -> None:
    body = _ONE_HOT.replace(".scatter_(1, pos[:, None], 1)", ".scatter_add_(1, pos[:, None], 1)")
    assert LINT.lines(body) == []


# Module state written by one class's forward and read by a method of another class of
# the object: the next call's step subtracts it from half scores.
_POINTER = """
class PointerBase(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.score = nn.Linear(d, 1)
        self.mask = None

    def step(self, x):
        scores = self.score(x).squeeze(-1)
        masked = scores - self.mask * 1e4
        self.mask = self.mask + F.one_hot(masked.argmax(-1), x.shape[1])
        return masked


class Pointer(PointerBase):
    def forward(self, x):
        self.mask = torch.zeros(1, device=x.device)
        return torch.stack([self.step(x) for _ in range(x.shape[1])], 1)
"""


def test_state_written_in_a_subclass_and_read_by_its_base_leaks() -> None:
    assert LINT_F.lines(_POINTER) == [17]
    model = LINT_F.model(_POINTER, "Pointer")(4).half()
    assert model(torch.randn(2, 3, 4).half()).dtype == torch.float32


def test_state_cast_where_the_base_reads_it_stays_silent() -> None:
    body = _POINTER.replace("self.mask * 1e4", "self.mask.to(scores.dtype) * 1e4")
    assert LINT_F.lines(body) == []


_STEPPED = """
class SteppedBase(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.score = nn.Linear(d, 1)

    def forward(self, x):
        self.mask = torch.zeros(1, device=x.device)
        return torch.stack([self.step(x) for _ in range(x.shape[1])], 1)


class Stepped(SteppedBase):
    def step(self, x):
        scores = self.score(x).squeeze(-1)
        return scores - self.mask * 1e4
"""


def test_state_written_in_a_base_and_read_by_a_subclass_leaks() -> None:
    assert LINT.lines(_STEPPED) == [8]
    model = LINT.model(_STEPPED, "Stepped")(4).half()
    assert model(torch.randn(2, 3, 4).half()).dtype == torch.float32


_BASE_FILE = """\
import torch
import torch.nn.functional as F
from torch import nn


class PointerBase(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.score = nn.Linear(d, 1)
        self.mask = torch.zeros(1)

    def step(self, x):
        scores = self.score(x).squeeze(-1)
        masked = scores - self.mask * 1e4
        self.mask = self.mask + F.one_hot(masked.argmax(-1), x.shape[1])
        return masked
"""

_DECODER_FILE = """\
import torch

from .base import PointerBase


class Pointer(PointerBase):
    def forward(self, x):
        out = torch.stack([self.step(x) for _ in range(x.shape[1])], 1)
        self.mask = torch.zeros(1, device=x.device)
        return out
"""


def test_state_reset_at_the_end_of_forward_and_read_by_a_base_of_another_file_leaks(
    tmp_path: Path,
) -> None:
    pkg = package(tmp_path / "pkg", {"base.py": _BASE_FILE, "decoder.py": _DECODER_FILE})
    assert _found(pkg) == [("decoder.py", 9, "HP101")]


def test_state_a_base_of_another_file_casts_stays_silent(tmp_path: Path) -> None:
    base = _BASE_FILE.replace("self.mask * 1e4", "self.mask.to(scores.dtype) * 1e4")
    pkg = package(tmp_path / "pkg", {"base.py": base, "decoder.py": _DECODER_FILE})
    assert _found(pkg) == []


# An object built by a class's from_* constructor holds its records' tensors.
_GRAPHS = """
from graphs_lib import Batch, Graph


class NoEdges(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d

    def forward(self, nodes):
        graphs = []
        for x in nodes:
            graphs.append(Graph(x=x, edge_attr=torch.zeros(x.shape[0], self.d, device=x.device)))
        batch = Batch.FROM(graphs)
        return batch
"""


def test_a_factory_held_by_records_a_from_constructor_gathers_leaks() -> None:
    assert LINT.lines(_GRAPHS.replace("FROM", "from_data_list")) == [13]


def test_records_handed_to_another_method_of_the_class_stay_unknown() -> None:
    assert LINT.lines(_GRAPHS.replace("FROM", "count")) == []


# A forward that returns nothing: the attributes it sets are its results.
_SCORED = """
from graphs_lib import off_diagonal


class Scored(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.w = nn.Parameter(torch.zeros(d, d))

    def forward(self, x):
        self.x = x
        self.b = off_diagonal(self.w)
        self.nll = self._nll()
        self.score = self.nll + self.b.abs().sum()

    def _nll(self):
        fit = (self.x - self.x @ self.b).square().sum()
        return fit - torch.linalg.slogdet(torch.eye(self.d) - self.b)[1]
"""


def test_fp32_kept_on_self_by_a_forward_that_returns_nothing_leaks() -> None:
    body = _SCORED
    assert LINT.lines(body) == [19]
    x = torch.randn(3, 2)
    eye_minus_half = torch.eye(2) - torch.zeros(2, 2).half()
    assert eye_minus_half.dtype == torch.float32
    assert (torch.tensor(1.0).half() - torch.linalg.slogdet(eye_minus_half)[1]).dtype == (
        torch.float32
    )
    assert x.dtype == torch.float32


def test_state_of_a_forward_that_returns_its_output_stays_unknown() -> None:
    body = _SCORED.replace(
        "self.score = self.nll + self.b.abs().sum()",
        "self.score = self.nll + self.b.abs().sum()\n        return x",
    )
    assert LINT.lines(body) == []


# Host data torch.tensor makes floating.
_LOCATION = """
class Location(nn.Module):
    def forward(self, x, lengths):
        b, n = x.shape[0], x.shape[1]
        weight = [[] for _ in range(b)]
        for i in range(b):
            for j in range(n):
                weight[i].append(VALUE)
        weight = torch.tensor(weight).to(x.device)
        return weight.unsqueeze(2) * x
"""


def test_a_list_filled_with_divisions_makes_fp32_weights_that_leak() -> None:
    assert LINT.lines(_LOCATION.replace("VALUE", "1 - j / n")) == [9]
    model = LINT.model(_LOCATION.replace("VALUE", "1 - j / n"), "Location")()
    assert model(torch.randn(2, 3, 4).half(), None).dtype == torch.float32


def test_a_list_filled_with_integers_stays_silent() -> None:
    assert LINT.lines(_LOCATION.replace("VALUE", "n - j")) == []


def test_a_list_filled_with_quotients_of_module_state_stays_unknown() -> None:
    # self.scale[j] may be a tensor: torch.tensor of 0-dim tensors keeps their dtype
    body = _LOCATION.replace(
        "class Location(nn.Module):\n",
        "class Location(nn.Module):\n    scale = torch.ones(64, dtype=torch.float64)\n\n",
    )
    assert LINT.lines(body.replace("VALUE", "1 / self.scale[j]")) == []


_TARGETS = """
import numpy as np


class Targets(nn.Module):
    def forward(self, outputs, keypoints):
        b, c, h, w = outputs.shape
        maps = np.zeros((b, h, w, c), dtype=DTYPE)
        for k in keypoints:
            maps[:, k[1], k[0], :] = 1.0
        maps = maps.transpose((0, 3, 1, 2))
        weights = 2 * np.ones((b, c, h, w), dtype=DTYPE)
        return {"heatmap": {"target": torch.tensor(maps, device=outputs.device),
                            "weights": torch.tensor(weights, device=outputs.device)}}
"""


def test_numpy_arrays_made_float32_and_returned_as_tensors_leak() -> None:
    assert LINT.lines(_TARGETS.replace("DTYPE", "np.float32")) == [13, 14]
    maps = np.zeros((1, 2, 2, 1), dtype=np.float32).transpose((0, 3, 1, 2))
    assert torch.tensor(maps).dtype == torch.float32


def test_numpy_arrays_made_integer_stay_silent() -> None:
    assert LINT.lines(_TARGETS.replace("DTYPE", "int")) == []


_STACKED = """
import numpy as np


def peaks(scores):
    locs = np.stack((scores.argmax(1), scores.argmax(1)), axis=-1).astype(np.float32)
    if locs.ndim == 3:
        locs = locs.reshape(-1, 2)
    return locs, scores.max(1)


class Labels(nn.Module):
    def __init__(self, smooth):
        super().__init__()
        self.make = self._smooth if smooth else self._plain

    def forward(self, outputs, points):
        xs, ws = [], []
        for p in points:
            x, w = self.make(p)
            xs.append(x)
            ws.append(w)
        found, _ = peaks(outputs.detach().cpu().numpy())
        return {"target": torch.tensor(np.stack(xs)), "weights": torch.tensor(np.stack(ws)),
                "found": torch.tensor(found)}

    def _smooth(self, p):
        return np.zeros((4, 8), dtype=np.float32), (p > 0).astype(np.int64)

    def _plain(self, p):
        x = np.ones((4, 8), dtype=DTYPE)
        return x, (p > 0).astype(np.int64)
"""


def test_numpy_floats_stacked_from_a_chosen_method_and_a_helper_leak() -> None:
    # target (np.stack of float32 rows) and found (a helper's astype(float32)), not weights
    assert LINT.lines(_STACKED.replace("DTYPE", "np.float32")) == [24, 25]


def test_a_chosen_method_that_may_return_integers_leaves_the_stack_unknown() -> None:
    assert LINT.lines(_STACKED.replace("DTYPE", "np.int64")) == [25]
