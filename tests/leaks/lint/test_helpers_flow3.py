"""Round eighteen, recall (issue 41): fp32 made where half values are written into it or
given beside it, on small models written for this test, none copied from a library:

- an fp32 zero buffer that receives half values through ``scatter_add_``, ``index_add_``,
  ``scatter_reduce_`` or ``index_put_`` (each raises on the dtype mismatch), chained on the
  factory or bound first, also where the half source went through ``split``, a
  comprehension, ``index_select`` or a tuple unpacked from a list of layer outputs;
- a float ``0``/``-inf`` mask made fp32 and given to a half ``nn.MultiheadAttention``;
- an integer tensor made floating by ``torch.log`` (fp32 whatever the model's dtype).

Each test fails on the rules before this round; its silent siblings are asserted beside.
"""

from __future__ import annotations

from halfprec.leaks.lint.config import LintConfig
from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F, prefix="HP1", config=LintConfig(select=("HP",)))  # every rule
_found = LINT.found


# -- half values scattered into an fp32 buffer -----------------------------------------------
POOL = """\
    class Pool(nn.Module):
        def __init__(self, d, groups):
            super().__init__()
            self.proj = nn.Linear(d, d)
            self.groups = groups

        def forward(self, x, group):
            h = self.proj(x)
            where = x.device
            sums = torch.zeros(self.groups, h.shape[1]).to(where).index_add_(0, group, h)
            peak = torch.zeros(self.groups, h.shape[1]).to(where)
            peak.scatter_reduce_(0, group[:, None].expand_as(h), h, reduce="amax")
            slots = torch.zeros(self.groups, h.shape[1])
            slots.index_put_((group,), h, accumulate=True)
            return sums + peak + slots.to(where)
    """


def test_half_values_scattered_into_an_fp32_buffer_are_reported() -> None:
    assert _found(POOL) == [(10, "HP101"), (11, "HP101"), (13, "HP101")]


def test_buffer_cast_before_the_scatter_stays_silent() -> None:
    cast = POOL.replace(".to(where)", ".to(where, h.dtype)")
    cast = cast.replace("self.groups, h.shape[1])\n", "self.groups, h.shape[1]).to(h)\n")
    assert cast.count("h.dtype") == 3 and _found(cast) == []


def test_counter_and_indexed_buffer_stay_silent() -> None:
    body = """\
        class Share(nn.Module):
            def __init__(self, d, groups):
                super().__init__()
                self.proj = nn.Linear(d, d)
                self.groups = groups

            def forward(self, x, group):
                h = self.proj(x)
                ones = torch.ones(group.shape[0], dtype=torch.float32, device=x.device)
                count = torch.zeros(self.groups).to(x.device).index_add_(0, group, ones)
                rank = torch.zeros(self.groups, device=x.device)
                rank.scatter_(0, group, 1.0)
                return h[count.long()[group] > 1], h[rank.argsort()]
        """
    assert _found(body) == []


def test_source_through_split_and_picks_is_reported() -> None:
    body = """\
        class Routes(nn.Module):
            def __init__(self, d, k):
                super().__init__()
                self.w = nn.Parameter(torch.randn(d, d))
                self.k = k

            def forward(self, x, src, dst):
                h = torch.relu(x @ self.w)
                parts = h.chunk(self.k, dim=-1)
                stacked = torch.stack([p.unsqueeze(0) for p in parts], dim=0)
                sent = stacked.index_select(1, src).transpose(0, 1)
                into = dst[None, :, None].expand(self.k, -1, stacked.shape[-1])
                got = torch.zeros(stacked.shape).scatter_add_(1, into, sent.transpose(0, 1))
                return got.flatten(1)
        """
    assert _found(body) == [(13, "HP101")]


HELPER = """\
    class Mix(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.w = nn.Parameter(torch.randn(n))

        def forward(self, ends, values):
            return ends, values * self.w[: values.shape[0]]


    class Stack(nn.Module):
        def __init__(self, n, depth):
            super().__init__()
            self.mixes = nn.ModuleList([Mix(n) for _ in range(depth)])
            self.n = n

        def degree(self, ends, n, weight):
            totals = torch.zeros((n,)).to(ends.device)
            totals = totals.scatter_add_(0, ends, weight)
            return totals[ends]

        def rescale(self, layers):
            out = []
            for i in range(len(layers)):
                ends, values = layers[i]
                out.append(self.degree(ends.detach(), self.n, values.detach()) * values)
            return out

        def forward(self, ends, values):
            layers = []
            for mix in self.mixes:
                layers.append(mix(ends, values))
            return self.rescale(layers)
    """


def test_buffer_in_a_helper_given_layer_outputs_unpacked_is_reported() -> None:
    assert _found(HELPER) == [(17, "HP101")]


def test_buffer_in_a_helper_given_counts_stays_silent() -> None:
    counted = HELPER.replace(
        "values.detach()) * values", "torch.ones_like(ends, dtype=torch.float)) > 1"
    )
    assert counted != HELPER and _found(counted) == []


# -- a float mask into a half MultiheadAttention ---------------------------------------------
BAND = """\
    class Band(nn.Module):
        def __init__(self, d, width):
            super().__init__()
            self.mix = nn.MultiheadAttention(d, 2, batch_first=True)
            self.norm = nn.LayerNorm(d)
            self.width = width

        def band(self, n):
            steps = torch.arange(n)
            gap = (steps[:, None] - steps[None, :]).abs()
            return torch.where(gap > self.width, torch.full((1,), float("-inf")), torch.zeros(1))

        def forward(self, x):
            h = self.norm(x)
            allowed = self.band(h.shape[1]).to(h.device)
            out, _ = self.mix(h, h, h, attn_mask=allowed)
            return out
    """


def test_float_mask_into_a_half_attention_layer_is_reported() -> None:
    assert _found(BAND) == [(11, "HP101"), (11, "HP101")]


def test_mask_cast_or_boolean_stays_silent() -> None:
    cast = BAND.replace(".to(h.device)", ".to(h.device, h.dtype)")
    assert cast != BAND and _found(cast) == []
    flag = BAND.replace(".to(h.device)", ".to(h.device).isinf()")
    assert flag != BAND and _found(flag) == []


# -- an integer tensor made floating by a float function -------------------------------------
SPREAD = """\
    class Spread(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x, total: int):
            h = self.proj(x)
            norm = torch.logsumexp(h, dim=-1) - torch.log(torch.tensor([len(x) * total]))
            root = h / torch.tensor([total]).to(x.device).sqrt()
            return norm, root
    """


def test_integer_tensor_through_a_float_function_is_reported() -> None:
    assert _found(SPREAD) == [(8, "HP101"), (9, "HP101")]


def test_zero_dim_or_cast_log_stays_silent() -> None:
    plain = SPREAD.replace("torch.tensor([len(x) * total])", "torch.tensor(len(x) * total)")
    plain = plain.replace(".sqrt()", ".sqrt().to(h.dtype)")
    assert plain.count("to(h.dtype)") == 1 and _found(plain) == []
