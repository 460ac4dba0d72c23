"""Thirteenth-round rules: a submodule bound by a chained assignment (``self.m = m =
Net(...)``); a 0-dim fp32 tensor met with an integer tensor, which makes an fp32 tensor with
dimensions; a function imported from ``math`` gives a Python number, so
``torch.tensor(log(n) / d)`` is a 0-dim fp32 factory; ``.to(xs[0].device)`` is no cast; a
list of tensors followed through a comprehension over it (also as one of ``zip``'s or
``enumerate``'s lists) and ``nn.utils.rnn``'s padding; a dict given a tensor under one key
(``cache["buf"] = t``) holds other values under the others, and a dict parameter holds it
in each caller; ``super().forward`` runs the base class's ``forward``;
``q, k, v = a, *torch.chunk(b, 2)`` binds each name; in a loop, a name rebound late in the
body is read by the body's earlier uses on the next pass. Each model here is small and
written for this test."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from halfprec.leaks.lint import fix_source, lint_source
from support.lint_models import HEAD, hp101_lines

_found = hp101_lines


CHAINED = """\
    class Mapper(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim
            self.net = nn.Linear(dim, dim)

        def forward(self, z):
            return self.net(z)


    class Gen(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.mapper = mapper = Mapper(dim)
            self.out = nn.Linear(mapper.dim, 4)

        def forward(self, x):
            z = torch.randn(x.shape[0], self.mapper.dim)
            return self.out(self.mapper(z) + x)
    """


def test_a_submodule_bound_by_a_chained_assignment_is_followed_into() -> None:
    assert _found(CHAINED) == [18]


def test_a_chained_assignment_of_a_weightless_layer_stays_silent() -> None:
    body = CHAINED.replace("self.net = nn.Linear(dim, dim)", "self.net = nn.Identity()")
    body = body.replace("self.out(self.mapper(z) + x)", "self.mapper(z).long() + x")
    assert _found(body) == []


INTEGER_TIMES_0DIM = """\
    class TimeFeatures(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
            self.proj = nn.Linear(2 * n, n)

        def forward(self, t):
            rate = torch.tensor(math.log(100.0) / self.n, device=t.device)
            freqs = torch.exp(-rate * torch.arange(self.n, device=t.device))
            ang = t[:, None] * freqs[None, :]
            return self.proj(torch.cat([ang.sin(), ang.cos()], dim=-1))
    """
MATH = "import math\n\nimport torch\nfrom torch import nn\n\n\n"


def test_the_promotion_behind_the_integer_tensor_rule() -> None:
    rate = torch.tensor(0.5)
    freqs = torch.exp(-rate * torch.arange(4))
    assert freqs.dim() == 1 and freqs.dtype == torch.float32
    assert (torch.ones(2, 1, dtype=torch.float16) * freqs).dtype == torch.float32


def test_a_0dim_fp32_times_an_integer_tensor_has_dimensions_and_leaks() -> None:
    assert _found(INTEGER_TIMES_0DIM, MATH) == [8]


def test_a_0dim_fp32_times_a_half_tensor_stays_silent() -> None:
    body = INTEGER_TIMES_0DIM.replace("torch.arange(self.n, device=t.device)", "t")
    body = body.replace("t[:, None] * freqs[None, :]", "freqs[:, None].expand(-1, self.n)")
    assert _found(body, MATH) == []


FROM_MATH = """\
    class Scaled(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n

        def forward(self, x):
            w = torch.tensor(log(10.0) / self.n, device=x.device)
            return x.sum() * w
    """


def test_a_function_imported_from_math_gives_a_python_number() -> None:
    head = "from math import log\n\nimport torch\nfrom torch import nn\n\n\n"
    assert _found(FROM_MATH, head) == [7]


def test_a_function_of_another_module_may_give_a_tensor() -> None:
    head = "from torch import log\n\nimport torch\nfrom torch import nn\n\n\n"
    assert _found(FROM_MATH, head) == []


LISTED_STATE = """\
    class SetDecoder(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.d = d
            self.drop = nn.Dropout(0.1)
            self.rnn = nn.GRU(d, d, batch_first=True)

        def decode(self, hs, starts):
            starts = [self.drop(s) for s in starts]
            packed = nn.utils.rnn.pad_sequence(starts, batch_first=True)
            out, _ = self.rnn(packed, hs)
            return out

        def forward(self, hs, counts):
            starts = [torch.zeros(c, self.d).to(hs[0].device) for c in counts]
            return self.decode(hs, starts)
    """


def test_the_dtype_rule_behind_the_listed_state() -> None:
    gru = nn.GRU(4, 4, batch_first=True).half()
    with pytest.raises((RuntimeError, ValueError)):
        gru(torch.zeros(1, 2, 4), torch.zeros(1, 1, 4, dtype=torch.float16))


def test_a_list_of_fp32_tensors_through_a_comprehension_and_padding_reaches_a_half_layer() -> None:
    assert _found(LISTED_STATE) == [15]


def test_a_list_of_tensors_cast_in_the_comprehension_stays_silent() -> None:
    body = LISTED_STATE.replace("self.drop(s) for s", "self.drop(s).to(hs.dtype) for s")
    assert _found(body) == []


ZIPPED = """\
    def pad_rows(a, n):
        extra = torch.zeros(n - a.shape[0], a.shape[1]).to(a.device)
        return torch.cat([a, extra], dim=0)


    class Scores(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n

        def forward(self, embs, atts):
            padded = [pad_rows(a, self.n) for a in atts]
            return [torch.matmul(e, p.T) for e, p in zip(embs, padded)]
    """


def test_a_list_followed_as_one_of_zips_lists_meets_the_other() -> None:
    assert _found(ZIPPED) == [2]


def test_a_list_zipped_with_numbers_only_stays_silent() -> None:
    body = ZIPPED.replace("torch.matmul(e, p.T)", "p.sum().item() * e")
    assert _found(body) == []


KEYED = """\
    class Streamer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x, cache):
            cache["pending"] = torch.empty(0)
            x = torch.cat([cache["past"], x], dim=1)
            cache["past"] = x
            return self.proj(x)
    """


def test_a_dict_read_under_another_key_than_the_tensors_stays_silent() -> None:
    assert _found(KEYED) == []


def test_a_dict_read_under_the_tensors_key_is_followed() -> None:
    assert _found(KEYED.replace('cache["past"], x', 'cache["pending"], x')) == [7]


LOOPED = """\
    def fire(h, rate):
        acc = torch.zeros(h.shape[0], device=h.device)
        out = []
        for t in range(h.shape[1]):
            left = 1.0 - acc
            out.append(left[:, None] * h[:, t])
            acc = torch.where(rate[:, t] > 1.0, acc - torch.ones(h.shape[0], device=h.device), acc)
        return torch.stack(out, 1)


    class Integrator(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, 1)

        def forward(self, h):
            return fire(h, self.proj(h).squeeze(-1).sigmoid())
    """


def test_a_value_rebound_late_in_a_loop_is_read_early_on_the_next_pass() -> None:
    assert _found(LOOPED) == [2, 7]


def test_a_value_rebound_late_in_a_loop_read_early_only_for_its_shape_stays_silent() -> None:
    body = LOOPED.replace("left = 1.0 - acc", "left = h.new_ones(acc.shape[0])")
    assert _found(body) == []


FARTHEST = """\
    def farthest(xyz, k):
        b, n, _ = xyz.shape
        picked = torch.zeros(b, k, dtype=torch.long, device=xyz.device)
        distance = torch.ones(b, n).to(xyz.device) * 1e10
        far = torch.zeros(b, dtype=torch.long, device=xyz.device)
        rows = torch.arange(b, device=xyz.device)
        for i in range(k):
            picked[:, i] = far
            dist = ((xyz - xyz[rows, far, None]) ** 2).sum(-1).float()
            mask = dist < distance
            distance[mask] = dist[mask]
            far = torch.max(distance, -1)[1]
        return picked


    class Sampler(nn.Module):
        def forward(self, xyz):
            return xyz[:, farthest(xyz, 4)[0]]
    """


def test_the_indices_of_a_max_over_a_loop_distance_stay_silent() -> None:
    assert _found(FARTHEST) == []


def test_the_values_of_a_max_over_a_loop_distance_are_followed() -> None:
    body = FARTHEST.replace("far = torch.max(distance, -1)[1]", "far = torch.max(distance, -1)[0]")
    body = body.replace("return picked", "return picked + far[:, None] + xyz.sum(-1)[:, :1]")
    assert _found(body) == [4]


def test_a_list_whose_first_elements_device_is_read_is_no_fix_anchor() -> None:
    source = HEAD + textwrap.dedent(LISTED_STATE)
    found = [f for f in lint_source(source) if f.code == "HP101"]
    assert [f.line - 4 for f in found] == [15]
    assert "hs.new_zeros" not in fix_source(source)


HELD_BY_CALLER = """\
    class Chunker(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def reset(self, cache):
            cache["tail"] = torch.empty(0)
            cache["seen"] = 0

        def forward(self, x, cache):
            if not cache:
                self.reset(cache)
            x = torch.cat([cache["tail"], x], dim=-1)
            cache["tail"] = x[..., -4:]
            return self.proj(x)
    """


def test_a_dict_parameter_given_a_tensor_holds_it_in_the_caller() -> None:
    assert _found(HELD_BY_CALLER) == [7]


def test_a_dict_parameter_overwritten_under_the_key_before_the_read_stays_silent() -> None:
    old = 'x = torch.cat([cache["tail"], x], dim=-1)'
    new = 'cache["tail"] = x[..., :0]\n            x = torch.cat([cache["tail"], x], dim=-1)'
    assert _found(HELD_BY_CALLER.replace(old, new)) == []


INHERITED = """\
    class Attend(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.to_q = nn.Linear(d, d)
            self.to_kv = nn.Linear(d, 2 * d)

        def forward(self, x, ctx, mask=None):
            q, k, v = self.to_q(x), *torch.chunk(self.to_kv(ctx), 2, dim=-1)
            if mask is not None:
                k = k * mask[..., None]
            return (q @ k.transpose(-1, -2)).softmax(-1) @ v


    class Net(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.attn = Attend(d)

        def forward(self, x, ctx, mask=None):
            return self.attn(x, ctx, mask=mask)


    class GuidedNet(Net):
        def forward(self, x, ctx, mask=None):
            if mask is not None:
                mask = torch.cat([mask, torch.ones(mask.shape[0], 1, device=x.device)], dim=1)
            return super().forward(x, ctx, mask=mask)
    """


def test_a_mask_handed_to_super_forward_is_followed_into_the_base() -> None:
    assert _found(INHERITED) == [26]


def test_a_mask_cast_before_super_forward_stays_silent() -> None:
    body = INHERITED.replace(
        "return super().forward(x, ctx, mask=mask)",
        "return super().forward(x, ctx, mask=mask.to(x.dtype))",
    )
    assert _found(body) == []
