"""Value shapes the lint judges by torch's rules: a 0-dim loss total added to a value it
cannot rank stays 0-dim (and reaches the output), a 0-dim fp32 made from a scalar
parameter keeps dimensioned half tensors half, an empty seed joined with half tensors in a
list keeps fp32 in that list, an fp32 buffer meeting an explicit upcast of data the model
never made half is still fp32, integer tensors true-divided inside a comprehension over
``zip(..., strict=True)`` are fp32, a dict read under one key is not read again under
another, and a layer given an empty placeholder raises rather than carries fp32. Each
model here is small and written for this test; each torch fact is checked with torch."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec.leaks.lint import lint_paths
from support.lint_models import Snippets

HEAD = "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n\n"
LINT = Snippets(HEAD)
_found, _module = LINT.lines, LINT.model


# -- a 0-dim loss total returned beside another value -------------------------------------

TOTAL = """\
    class Total(nn.Module):
        def forward(self, feats, aux):
            total = torch.tensor(0.0, device=feats[0].device)
            for f in feats:
                total += f.abs().mean()
            total = total / len(feats)
            return total + 0.5 * aux
    """


def test_a_loss_total_added_to_an_unranked_value_is_reported() -> None:
    feats = [torch.randn(2, 3).half(), torch.randn(2, 3).half()]
    out = _module(TOTAL, "Total")()(feats, torch.tensor(1.0).half())
    assert out.dim() == 0 and out.dtype == torch.float32  # the half aux loss became fp32
    assert _found(TOTAL) == [3]


def test_a_loss_total_weighted_then_summed_in_a_dict_is_reported() -> None:
    body = """\
        class Weighted(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = 0.3

            def forward(self, preds, reg):
                loss = torch.zeros((), device=preds.device)
                loss = loss * self.weight - reg
                return {"loss": loss, "n": preds.shape[0]}
        """
    out = _module(body, "Weighted")()(torch.randn(4).half(), torch.tensor(0.1).half())
    assert out["loss"].dtype == torch.float32
    assert _found(body) == [7]


def test_a_loss_total_bound_and_returned_as_a_pair_is_reported() -> None:
    body = """\
        class Pair(nn.Module):
            def forward(self, scores, extra_loss):
                acc = torch.tensor(0.0)
                for s in scores:
                    acc = acc + s.pow(2).sum()
                out = acc - extra_loss
                return out, scores[0]
        """
    scores = [torch.randn(3).half()]
    assert _module(body, "Pair")()(scores, torch.tensor(0.2).half())[0].dtype == torch.float32
    assert _found(body) == [3]


def test_a_loss_total_added_to_the_activation_stays_silent() -> None:
    body = """\
        class Shift(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                bias = torch.tensor(0.0)
                bias += 1.0
                return self.proj(x) + bias
        """
    out = _module(body, "Shift")(4).half()(torch.randn(2, 4).half())
    assert out.dtype == torch.float16  # a 0-dim fp32 keeps a dimensioned half tensor half
    assert _found(body) == []


def test_a_0_dim_constant_added_to_an_unranked_input_stays_silent() -> None:
    body = """\
        class Offset(nn.Module):
            def forward(self, x, t):
                bias = torch.tensor(0.5, device=x.device)
                return x, t + bias
        """
    out = _module(body, "Offset")()(torch.randn(2).half(), torch.randn(2, 3).half())
    assert out[1].dtype == torch.float16  # no running total: t may have dimensions
    assert _found(body) == []


# -- a 0-dim fp32 made from a scalar parameter ------------------------------------------

SCALAR_PARAMETERS = {
    "isinstance": """\
        class Solve(nn.Module):
            def forward(self, x, gamma: float | torch.Tensor = 1.0):
                if not isinstance(gamma, torch.Tensor):
                    gamma = torch.tensor(gamma, device=x.device)
                return x + 1 / gamma * x
        """,
    "is_tensor": """\
        class Solve(nn.Module):
            def forward(self, x, scale=None):
                return x * self.inverse(x, 2.0)

            def inverse(self, x, scale: "float | torch.Tensor"):
                if not torch.is_tensor(scale):
                    scale = torch.tensor(scale)
                return 1 / scale * x
        """,
    "int": """\
        class Solve(nn.Module):
            def forward(self, x, steps: int = 4):
                n = torch.tensor(steps)
                return 1 / n * x
        """,
}


@pytest.mark.parametrize("form", sorted(SCALAR_PARAMETERS))
def test_a_scalar_parameter_made_a_0_dim_tensor_meets_half_silently(form: str) -> None:
    body = SCALAR_PARAMETERS[form]
    out = _module(body, "Solve")()(torch.randn(2, 3).half())
    assert out.dtype == torch.float16
    assert _found(body) == []


def test_a_parameter_that_may_be_a_tensor_is_not_taken_as_a_scalar() -> None:
    body = """\
        class Solve(nn.Module):
            def forward(self, x, gamma: float | torch.Tensor = 1.0):
                g = torch.tensor(gamma)
                return x * (1 / g)
        """
    assert _found(body) == [3]  # torch.tensor of a tensor of any rank: unchanged


# -- an empty seed joined in a list, read by index ---------------------------------------

SEEDED = """\
    from elsewhere import Post


    class Seeds(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.heads = nn.ModuleList([nn.Linear(d, d), nn.Linear(d, d)])
            self.post = Post()

        def forward(self, x):
            outs = [torch.empty(0, device=x.device) for _ in self.heads]
            for i in range(2):
                outs[i] = torch.cat((outs[i], self.heads[i](x)))
            return self.post(outs)
    """


def test_an_empty_seed_joined_in_a_list_is_reported() -> None:
    heads = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]).half()
    x = torch.randn(2, 4).half()
    assert torch.cat((torch.empty(0), heads[0](x).flatten())).dtype == torch.float32
    assert _found(SEEDED) == [11]


def test_an_empty_seed_joined_with_a_layer_bound_to_a_name_is_reported() -> None:
    body = """\
        from elsewhere import Post


        class Seeds(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.heads = nn.ModuleList([nn.Linear(d, d), nn.Linear(d, d)])
                self.post = Post()

            def forward(self, x):
                bank = {k: torch.empty(0, device=x.device) for k in range(2)}
                for k in range(2):
                    head = self.heads[k].to(x.device)
                    with torch.no_grad():
                        y = head(x)
                    bank[k] = torch.cat([bank[k], y.flatten()])
                return self.post(bank)
        """
    assert _found(body) == [11]


def test_an_empty_seed_joined_with_a_helper_of_another_file_is_reported(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "util.py").write_text(
        "import torch\n\n\ndef log_density(d: int, u, j):\n"
        "    return d * 0.5 - 0.5 * torch.sum(u**2, 1) + j\n"
    )
    imports = "from .util import log_density\nfrom elsewhere import Post\n\n\n"
    model = (
        HEAD
        + imports
        + textwrap.dedent(
            """\
        class Flow(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.decoders = nn.ModuleList([nn.Linear(d, d), nn.Linear(d, d)])
                self.post = Post()

            def forward(self, x):
                acc = [torch.empty(0, device=x.device) for _ in self.decoders]
                for i, _ in enumerate(self.decoders, start=0):
                    dec = self.decoders[i].to(x.device)
                    u, j = dec(x), dec(x).sum(1)
                    lp = log_density(4, u, j)
                    acc[i] = torch.cat((acc[i], lp / 4))
                return self.post(acc)
        """
        )
    )
    (package / "flow.py").write_text(model)
    found = [(Path(f.path).name, f.line) for f in lint_paths([package]).findings]
    assert found == [("flow.py", HEAD.count("\n") + 4 + 8)]


# -- an fp32 buffer meeting an upcast of data the model never made half (ruling 4 (b)) -------

UPCASTS = {
    "float": "keep = F.max_pool2d(mask, 2).float()",
    "to": "keep = F.max_pool2d(mask, 2).to(torch.float32)",
    "double": "keep = F.max_pool2d(mask, 2).double()",
}


@pytest.mark.parametrize("form", sorted(UPCASTS))
def test_a_buffer_times_an_upcast_mask_of_data_is_fp32_asked_for(form: str) -> None:
    """The lead's fourth ruling (b): the buffer first meets fp32 or double that the library
    asks for in a value of data (the mask's cast), so it is not reported."""
    body = """\
        class Swap(nn.Module):
            def forward(self, emb, mask):
                fake = torch.zeros(emb.shape[0], emb.shape[1], 2, 2)
                for k in range(emb.shape[0]):
                    fake[k] = emb[k].flip(0)
                KEEP
                return keep * fake + (1.0 - keep) * emb
        """.replace("KEEP", UPCASTS[form])
    emb, mask = torch.randn(1, 3, 2, 2).half(), torch.ones(1, 1, 4, 4)
    assert _module(body, "Swap")()(emb, mask).dtype != torch.float16
    assert _found(body) == []


def test_a_buffer_times_an_upcast_of_the_activation_stays_hp201s() -> None:
    body = """\
        class Mix(nn.Module):
            def forward(self, x):
                w = torch.ones(x.shape[-1])
                return (x.float() * w).to(x.dtype)
        """
    assert _found(body) == []


# -- a weight buffer filled by subscript, times a value made by method arithmetic --------

METHOD_ARITHMETIC = ["g.sub(p).pow(2)", "g.add(p)", "g.mul(p).abs()"]


@pytest.mark.parametrize("expr", METHOD_ARITHMETIC)
def test_a_buffer_filled_by_subscript_times_method_arithmetic_is_reported(expr: str) -> None:
    body = """\
        class Masked(nn.Module):
            def __init__(self, factors: list[float] = [1.0]):
                super().__init__()
                self.factors = factors

            def gains(self, x):
                return x.abs()

            def forward(self, x, max_bin=None):
                b, f = x.shape
                g = self.gains(x)
                p = x.clamp_min(1e-6)
                tmp = EXPR
                if max_bin is not None:
                    m = torch.ones((b, f), device=x.device)
                    for i, mb in enumerate(max_bin):
                        m[i, mb:] = 0
                    tmp = tmp * m
                loss = 0.0
                for factor in self.factors:
                    loss = loss + tmp.mean() * factor
                return loss
        """.replace("EXPR", expr)
    out = _module(body, "Masked")()(torch.rand(2, 4).half(), [1, 2])
    assert out.dtype == torch.float32
    assert _found(body) == [15]


# -- integer tensors true-divided inside a comprehension ---------------------------------

STRICT = """\
    class Scale(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.pool = Pool(d)

        def forward(self, feats, boxes: torch.Tensor, sizes, new_sizes):
            scales = [
                torch.tensor(n) / torch.tensor([o[0], o[1]])
                for o, n in zip(sizes, new_sizes, strict=True)
            ]
            boxes = [b * s.repeat(2) for b, s in zip(boxes, scales, strict=True)]
            return self.pool(feats, boxes)
    """


def test_integer_tensors_divided_in_a_strict_zip_are_reported() -> None:
    size, new = torch.tensor((4, 6)), torch.tensor([8, 12])
    assert (new / size).dtype == torch.float32  # int / int is true division: fp32
    assert (torch.ones(1, 4).half() * (new / size).repeat(2)).dtype == torch.float32
    assert _found("from elsewhere import Pool\n\n\n" + textwrap.dedent(STRICT)) == [11, 11]


def test_integer_tensors_divided_in_an_enumerate_with_a_start_are_reported() -> None:
    body = STRICT.replace(
        "[b * s.repeat(2) for b, s in zip(boxes, scales, strict=True)]",
        "[boxes[i - 1] * s for i, s in enumerate(scales, start=1)]",
    )
    assert _found("from elsewhere import Pool\n\n\n" + textwrap.dedent(body)) == [11, 11]


def test_integer_tensors_divided_then_looped_over_in_a_strict_zip_are_reported() -> None:
    body = STRICT.replace(
        "boxes = [b * s.repeat(2) for b, s in zip(boxes, scales, strict=True)]",
        "boxes = list(b * s for b, s in zip(boxes, scales, strict=True))",
    )
    assert _found("from elsewhere import Pool\n\n\n" + textwrap.dedent(body)) == [11, 11]


# -- a dict read under one key, then under another ---------------------------------------


def test_a_dict_read_under_its_key_is_not_read_again_under_another() -> None:
    body = """\
        class Cached(nn.Module):
            def forward(self, x):
                cache = {"count": torch.zeros(4), "x": x}
                n = cache["count"].shape[0]
                return cache["x"] * 2 + n
        """
    assert _module(body, "Cached")()(torch.randn(3).half()).dtype == torch.float16
    assert _found(body) == []


def test_a_dict_read_under_its_key_in_two_statements_stays_apart() -> None:
    body = """\
        class Cached(nn.Module):
            def forward(self, x):
                state = {}
                state["spare"] = torch.zeros(x.shape[0])
                if state["spare"].numel() == 0:
                    state["spare"] = x
                state["x"] = x
                return state["x"] * 2
        """
    assert _found(body) == []


# -- an empty placeholder given to a layer -----------------------------------------------


def test_an_empty_placeholder_given_to_a_layer_stays_silent() -> None:
    body = """\
        class Stages(nn.Module):
            def __init__(self, d, active=(True, False)):
                super().__init__()
                self.ups = nn.ModuleList([nn.Linear(d, d), nn.Linear(d, d)])
                self.final = nn.Linear(d, d)
                self.active = active

            def forward(self, x):
                out = torch.empty(0)
                started = False
                for i in range(2):
                    if started:
                        out = self.ups[i](x + out)
                    elif self.active[i]:
                        started = True
                        out = self.ups[i](x)
                return self.final(out)
        """
    with pytest.raises(RuntimeError):
        nn.Linear(4, 4).half()(torch.empty(0))  # no shape a layer takes
    assert _module(body, "Stages")(4).half()(torch.randn(2, 4).half()).dtype == torch.float16
    assert _found(body) == []


# -- a padding mask given to masked_fill -------------------------------------------------

MASKS = {
    "method": "scores = scores.masked_fill(pad, float('-inf'))",
    "in place": "scores.masked_fill_(pad, float('-inf'))",
    "torch": "scores = torch.masked_fill(scores, mask=pad, value=float('-inf'))",
}


@pytest.mark.parametrize("form", sorted(MASKS))
def test_an_upcast_padding_mask_given_to_masked_fill_stays_silent(form: str) -> None:
    body = """\
        class Pad(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x, pad_mask, extra: int):
                filler = torch.zeros((pad_mask.shape[0], extra), device=pad_mask.device)
                pad = torch.cat([pad_mask.float(), filler.float()], dim=1)
                scores = self.proj(x)
                FILL
                return scores
        """.replace("FILL", MASKS[form])
    assert _found(body) == []
