"""Eleventh-round rules: a 0-dim fp32 tensor that reaches the module's output (a loss
started with ``torch.tensor(0.)``) is a leak with its own message; Python floats known from
type annotations made a tensor; a layer built by a name another file binds to
``partial(nn.Linear, ...)``. Each model here is small and written for this test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from halfprec.leaks.lint import lint_paths
from support.lint_models import Snippets, package

HEAD = (
    "from typing import List\n\nimport torch\nimport torch.nn.functional as F\n"
    "from torch import nn\n\n\n"
)
LINT = Snippets(HEAD)
_findings, _found = LINT.messages, LINT.lines


def test_the_promotion_behind_the_zero_output_rule() -> None:
    half = torch.ones(3, dtype=torch.float16)
    assert (torch.tensor(0.0) * 0.5 + half.mean()).dtype == torch.float32
    assert torch.tensor(0.0).dtype == torch.float32  # returned alone: an fp32 output


ZERO_OUTPUTS = {
    "a loss placeholder when the term is off": """\
        class TwoTerms(nn.Module):
            def __init__(self, w_aux: float = 0.0) -> None:
                super().__init__()
                self.head = nn.Linear(4, 4)
                self.w_aux = w_aux

            def aux(self, y, t):
                return F.l1_loss(y, t)

            def forward(self, x, t):
                y = self.head(x)
                aux = self.aux(y, t) if self.w_aux > 0 else torch.tensor(0.0)
                return y, {"aux": self.w_aux * aux, "fit": F.mse_loss(y, t)}
        """,
    "an empty batch's zero loss": """\
        class Boxes(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.reg = nn.Linear(4, 4)

            def forward(self, feats, targets):
                if feats.shape[0] == 0:
                    return torch.zeros(())
                return F.smooth_l1_loss(self.reg(feats), targets)
        """,
}


@pytest.mark.parametrize("body", ZERO_OUTPUTS.values(), ids=list(ZERO_OUTPUTS))
def test_a_0dim_fp32_value_reaching_the_output_is_reported(body: str) -> None:
    found = _findings(body)
    assert len(found) == 1
    assert "0-dim fp32 value that reaches the module's output" in found[0][1]


def test_a_0dim_fp32_value_meeting_a_half_tensor_with_dimensions_is_not() -> None:
    body = """\
        class Scaled(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                scale = torch.tensor(0.5)
                return self.proj(x) * scale
        """
    assert _found(body) == []


def test_a_0dim_copy_of_a_half_loss_is_not_made_fp32() -> None:
    body = """\
        class Copy(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                div = F.mse_loss(self.proj(x), x)
                return torch.tensor(0.5 * div)
        """
    assert _found(body) == []


def test_floats_from_an_annotated_helper_made_a_tensor_meet_the_half_scores() -> None:
    body = """\
        def path_score(path) -> float:
            return path[1]


        class Rescore(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.out = nn.Linear(4, 4)

            def forward(self, x, paths):
                logp = self.out(x).log_softmax(-1)
                prior = torch.tensor([path_score(p) for p in paths]).unsqueeze(1)
                return prior + logp
        """
    assert _found(body) == [12]


def test_a_list_annotated_as_floats_made_a_tensor_meets_the_half_input() -> None:
    body = """\
        class Gains(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.out = nn.Linear(4, 4)

            def forward(self, x, gains: List[float]):
                return self.out(x) * torch.tensor(gains)
        """
    assert _found(body) == [7]


def test_a_float_annotated_scalar_or_integer_list_stays_silent() -> None:
    body = """\
        class Temp(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.out = nn.Linear(4, 4)

            def forward(self, x, temp: float, ids: List[int]):
                t = torch.tensor(temp)
                keep = torch.tensor(ids)
                return self.out(x)[:, keep] / t
        """
    assert _found(body) == []


_ALIAS = """\
from functools import partial

from torch import nn

Dense = partial(nn.Linear, bias=False)
"""

_MODEL = """\
import torch
from torch import nn

from .layers import Dense


class Denoise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = Dense(1, 3)

    def forward(self, coords, sigma: float):
        noise = torch.full((coords.shape[0], 1), sigma)
        return coords * self.embed(noise).to(coords.dtype)
"""


def test_a_layer_built_by_a_partial_of_linear_in_another_file_meets_the_tensor(
    tmp_path: Path,
) -> None:
    pkg = package(tmp_path / "pkg", {"layers.py": _ALIAS, "model.py": _MODEL})
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == [("model.py", 13)]


def test_a_layer_alias_of_a_weightless_layer_hands_the_tensor_on(tmp_path: Path) -> None:
    layers = _ALIAS.replace("partial(nn.Linear, bias=False)", "nn.Dropout")
    model = _MODEL.replace("Dense(1, 3)", "Dense(0.1)")
    pkg = package(tmp_path / "pkg", {"layers.py": layers, "model.py": model})
    assert lint_paths([pkg]).findings == []


def test_a_branch_that_rebinds_from_the_device_only_leaves_the_old_value_flowing() -> None:
    body = """\
        class Clamped(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x, y):
                loss = F.l1_loss(self.proj(x), y)
                if loss.item() > 1.0:
                    loss = torch.tensor(1.0, device=loss.device)
                if loss.item() < 0.0:
                    loss = torch.tensor(0.0, device=loss.device)
                return loss
        """
    assert _found(body) == [9, 11]


def test_a_branch_that_rebinds_from_the_values_still_ends_the_old_value() -> None:
    body = """\
        class Matched(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                h = self.proj(x)
                bias = torch.zeros(4, device=h.device)
                if bias.dtype != h.dtype:
                    bias = bias.to(h.dtype)
                return h + bias
        """
    assert _found(body) == []


def test_zero_placeholders_of_a_loss_of_tensor_pairs_reach_its_output() -> None:
    body = """\
        from typing import Optional, Tuple

        from torch import Tensor

        Pair = Tuple[Tensor, Tensor]


        class PairLoss(nn.Module):
            def __init__(self, w: float = 1.0) -> None:
                super().__init__()
                self.w = w

            def _term(self, pair):
                return F.mse_loss(pair[0], pair[1])

            def forward(self, a: Optional[Tuple[Tensor, Tensor]], b: Optional[Pair]):
                la = self._term(a) if a is not None else torch.tensor(0.0)
                lb = self._term(b) if b is not None else torch.tensor(0.0)
                return self.w * la + self.w * lb
        """
    found = _findings(body)
    assert [line for line, _ in found] == [17, 18]
    assert all("reaches the module's output" in message for _, message in found)


def test_a_zero_loss_of_a_module_that_another_module_of_the_file_holds_is_its_output() -> None:
    body = """\
        class Distance(nn.Module):
            def forward(self, a, b, normalize: bool = True):
                d = (a - b).pow(2).sum(-1)
                if not normalize:
                    return d.sum()
                if d.numel() == 0:
                    return torch.tensor(0.0, device=a.device)
                return d.mean()


        class Chunked(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.dist = Distance()
                self.proj = nn.Linear(4, 4)

            def forward(self, xs, ys):
                total = 0.0
                for x, y in zip(xs, ys):
                    total += self.dist(self.proj(x), y, normalize=False)
                return total
        """
    assert _found(body) == [7]


def test_a_torch_function_imported_by_name_meets_like_torch_dot_it() -> None:
    body = """\
        from torch import sqrt


        class Noised(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = nn.Linear(4, 4)

            def forward(self, x):
                t = torch.rand(x.shape[0], 1)
                return self.net(x * sqrt(t.sigmoid()))
        """
    assert _found(body) == [10]


def test_a_time_drawn_in_forward_is_followed_through_six_calls_to_the_half_input() -> None:
    body = """\
        def schedule(t):
            return torch.cos(t * 1.5)


        def pad(x, t):
            return t.view(-1, 1)


        class Diffusion(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = nn.Linear(4, 4)

            def times(self, b):
                return torch.rand(b)

            def noised(self, x, t):
                return x * pad(x, schedule(t))

            def losses(self, x, t):
                return self.noised(x, t)

            def step(self, x, t):
                return self.losses(x, t)

            def forward(self, x):
                t = self.times(x.shape[0])
                return self.net(self.step(x, t))
        """
    assert _found(body) == [15]


_HELPERS = """\
def mix(x, noise, w):
    return x + w * noise
"""

_MIXER = """\
import torch
from torch import nn

from .helpers import mix


class Mixer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        return mix(h, torch.randn(h.shape), 0.1)
"""


def test_a_tensor_passed_to_a_function_of_another_file_is_followed_there(tmp_path: Path) -> None:
    pkg = package(tmp_path / "pkg", {"helpers.py": _HELPERS, "mixer.py": _MIXER})
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == [("mixer.py", 14)]


def test_a_function_of_another_file_that_casts_the_tensor_ends_it(tmp_path: Path) -> None:
    helpers = _HELPERS.replace("w * noise", "w * noise.to(x.dtype)")
    pkg = package(tmp_path / "pkg", {"helpers.py": helpers, "mixer.py": _MIXER})
    assert lint_paths([pkg]).findings == []


def test_a_tensor_is_followed_through_many_names() -> None:
    body = """\
        class Chain(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                a0 = torch.rand(4)
                a1 = a0 * 2
                a2 = a1 * 2
                a3 = a2 * 2
                a4 = a3 * 2
                a5 = a4 * 2
                a6 = a5 * 2
                a7 = a6 * 2
                a8 = a7 * 2
                a9 = a8 * 2
                a10 = a9 * 2
                a11 = a10 * 2
                a12 = a11 * 2
                a13 = a12 * 2
                a14 = a13 * 2
                a15 = a14 * 2
                a16 = a15 * 2
                return self.proj(x) * a16
        """
    assert _found(body) == [7]
