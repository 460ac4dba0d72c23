"""One question decides a finding: does the fp32 tensor meet a half tensor, or reach the
module's output, uncast? Each model here is small and written for this test."""

from __future__ import annotations

import torch

from halfprec.leaks.lint import LintConfig, fix_source
from support.lint_models import HEAD_F, Snippets

EVERY = LintConfig(select=("HP",))
UNSAFE = LintConfig(select=("HP",), unsafe_fixes=True)
LINT = Snippets(HEAD_F)


def _found(body: str, config: LintConfig | None = None) -> list[tuple[int, str, bool]]:
    return [(n, f.code, f.fix is not None) for n, f in LINT.findings(body, config)]


def test_an_upcast_cast_back_before_it_meets_half_is_not_reported() -> None:
    body = """\
        class GatedMix(nn.Module):
            def forward(self, x):
                g, y = self.gate(x), self.proj(x)
                out = (x.float() + g.float() * y.float()).to(dtype=x.dtype)
                p = F.softmax(self.score(x).float(), dim=-1).type_as(x)
                return out * p
        """
    assert _found(body, EVERY) == []


def test_an_upcast_that_escapes_is_reported_only_when_hp2_is_selected() -> None:
    body = """\
        class Escape(nn.Module):
            def forward(self, x):
                h = self.norm(x)
                w = self.weight.float()
                return h * w, x.float()
        """
    assert _found(body) == []  # HP2 is off by default
    assert _found(body, EVERY) == [(4, "HP201", False), (5, "HP201", False)]


def test_a_minus_inf_mask_is_reported_whatever_its_name() -> None:
    for name in ("mask", "attention_mask", "causal", "bias"):
        body = f"""\
            class Causal(nn.Module):
                def forward(self, x):
                    t = x.shape[1]
                    {name} = torch.full((t, t), float("-inf"))
                    {name} = torch.triu({name}, 1)
                    scores = self.q(x) @ x.transpose(1, 2)
                    return (scores + {name}).softmax(-1)
            """
        assert _found(body) == [(4, "HP101", True)], name


def test_a_mask_that_is_cast_where_it_is_used_is_not_reported() -> None:
    body = """\
        class Pad(nn.Module):
            def forward(self, x):
                mask = torch.ones(x.shape[0], x.shape[1])
                keep = mask.bool()
                scale = torch.ones(x.shape[-1]).to(x.dtype)
                return x.masked_fill(~keep[..., None], 0.0) * scale
        """
    assert _found(body) == []


def test_a_factory_with_no_template_is_still_reported_without_a_fix() -> None:
    body = """\
        class Bias(nn.Module):
            def forward(self, input_ids):
                n = input_ids.shape[1]
                bias = torch.zeros(n, 1)
                return self.emb(input_ids) + bias
        """
    assert _found(body) == [(4, "HP101", False)]


def test_every_leaking_factory_is_reported_whatever_the_statement_shape() -> None:
    body = """\
        class PadCat(nn.Module):
            def forward(self, h):
                b, t, d = h.shape
                pad = torch.zeros(b, 1, d)
                fill = torch.empty(b, 1, d).fill_(0.0)
                scale = torch.ones(d)
                h = self.lin(h) * scale
                return torch.cat([pad, h, fill], dim=1)
        """
    assert _found(body) == [(4, "HP101", True), (5, "HP101", True), (6, "HP101", True)]


def test_an_integer_arange_divided_is_fp32_and_reported() -> None:
    body = """\
        class Ramp(nn.Module):
            def forward(self, x):
                n = x.shape[-1]
                ramp = torch.arange(n) / n
                half = torch.arange(n) * 0.5
                idx = torch.arange(n) // 2
                return self.lin(x) * ramp + half + x[..., idx]
        """
    assert _found(body) == [(4, "HP101", False), (5, "HP101", False)]


def test_indices_sort_keys_and_element_reads_are_not_reported() -> None:
    body = """\
        class Shuffle(nn.Module):
            def forward(self, x):
                b, t, d = x.shape
                noise = torch.rand(b, t, device=x.device)
                keep = torch.argsort(noise, dim=1)[:, : t // 2]
                w = torch.ones(3)
                y = self.lin(x)
                total = torch.zeros(2).sum()
                picked = torch.gather(y, 1, keep[..., None].expand(-1, -1, d))
                return y[:, 0] * w[0] + picked.sum(1) * w[1] + total
        """
    assert _found(body) == []


def test_a_counter_is_reported_but_never_rewritten_to_half() -> None:
    body = """\
        class ExpertCount(nn.Module):
            def forward(self, x):
                logits = self.router(x)
                choice = logits.argmax(-1)
                counts = torch.zeros(8)
                counts.index_add_(0, choice.flatten(), torch.ones(choice.numel()))
                tally = torch.zeros(8)
                for e in choice.flatten().tolist():
                    tally[e] += 1
                return logits, counts, tally
        """
    found = _found(body, UNSAFE)
    assert found == [(5, "HP101", False), (7, "HP101", False)]
    assert "torch.zeros(8)" in fix_source(LINT.source(body), UNSAFE)


def test_counting_in_bf16_would_miscount() -> None:
    """Why a counter keeps fp32: bf16 holds integers exactly only up to 256."""
    ones = torch.ones(8192)
    counted = torch.zeros(1, dtype=torch.bfloat16)
    counted.index_add_(0, torch.zeros(8192, dtype=torch.long), ones.bfloat16())
    assert counted.item() != 8192


def test_a_grid_sample_table_is_never_rewritten() -> None:
    upcast_input = """\
        class Warp(nn.Module):
            def forward(self, x):
                n, c, hh, ww = x.shape
                ys = torch.linspace(-1, 1, hh)
                xs = torch.linspace(-1, 1, ww)
                gy, gx = torch.meshgrid(ys, xs, indexing="ij")
                grid = torch.stack([gx, gy], -1).unsqueeze(0).expand(n, hh, ww, 2)
                return F.grid_sample(self.conv(x).float(), grid, align_corners=True)
        """
    assert _found(upcast_input) == []  # the grid meets an fp32 input: no leak
    half_input = upcast_input.replace("self.conv(x).float()", "self.conv(x)")
    assert _found(half_input, UNSAFE) == [(4, "HP101", False), (5, "HP101", False)]


def test_a_pinned_host_buffer_is_never_moved_to_the_activation_device() -> None:
    body = """\
        class Stage(nn.Module):
            def forward(self, x):
                y = self.lin(x)
                host = torch.zeros(y.shape, pin_memory=True)
                cpu = torch.ones(y.shape[-1], device="cpu")
                host.copy_(y)
                return y * cpu, host
        """
    assert _found(body, UNSAFE) == [(4, "HP101", False), (5, "HP101", False)]


def test_a_tensor_is_followed_into_calls_of_the_same_file_and_back() -> None:
    body = """\
        def sample(values, coords):
            return F.grid_sample(values, 2.0 * coords - 1.0)


        class Positions(nn.Module):
            def forward(self, mask):
                return mask.long().cumsum(-1)


        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.positions = Positions()

            def forward(self, logits):
                mask = torch.ones(logits.shape[0], logits.shape[1])
                pos = self.positions(mask)
                points = torch.rand(logits.shape[0], 8, 1, 2)
                return sample(logits, points), pos
        """
    found = _found(body)
    # the mask becomes integer positions inside Positions.forward: not a finding; the
    # points are grid_sample's grid on half logits inside `sample`: a finding, with no fix
    assert found == [(18, "HP101", False)]


def test_a_tensor_a_helper_returns_is_followed_into_its_callers() -> None:
    body = """\
        def noise(b):
            return torch.randn(b, 4)


        def steps(b):
            return torch.linspace(0, 1, b)


        class Sampler(nn.Module):
            def points(self, b):
                return b, torch.rand(b, 2)

            def forward(self, x):
                b, p = self.points(x.shape[0])
                h = self.proj(x) + noise(b)
                return h[:, :2] * p, steps(b).to(x.dtype)
        """
    assert _found(body) == [(2, "HP101", False), (11, "HP101", False)]


def test_a_module_output_its_holder_casts_is_not_reported() -> None:
    body = """\
        class Sinusoid(nn.Module):
            def forward(self):
                freqs = torch.exp(torch.arange(8).float() * -0.5)
                e = freqs[None].repeat(4, 1)
                return torch.cat([e.sin(), e.cos()], dim=-1)


        class TimeEmbed(nn.Module):
            def __init__(self):
                super().__init__()
                self.sinusoid = Sinusoid()
                self.mlp = nn.Linear(16, 16)

            def forward(self, x):
                return x + self.mlp(self.sinusoid().to(x.dtype))
        """
    assert _found(body) == []
    uncast = body.replace(".to(x.dtype))", ")")
    assert _found(uncast) == [(3, "HP101", False)]  # into nn.Linear's half weights


def test_a_tensor_through_a_callee_the_lint_cannot_see_is_reported_only_if_it_leaks() -> None:
    body = """\
        class Masked(nn.Module):
            def __init__(self, schedule):
                super().__init__()
                self.drop = nn.Dropout(0.1)
                self.schedule = schedule
                self.block = Block()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                keep = ~self.drop(torch.ones(x.shape[0])).bool()
                p = self.schedule(torch.rand(x.shape[0]))
                n = (p * x.shape[1]).long()
                h = self.block(torch.zeros(x.shape[0], 4)) * x
                return x[keep], n, h, self.proj(torch.randn(x.shape[0], 4))
        """
    assert [line for line, _, _ in _found(body)] == [14]


def test_einops_rearrange_hands_its_first_argument_on() -> None:
    body = """\
        from einops import rearrange


        class Knots(nn.Module):
            def forward(self, x):
                t = torch.linspace(0, 1, x.shape[-1])
                return x * rearrange(t, "n -> 1 n")
        """
    assert [line for line, _, _ in _found(body)] == [6]
    both = body.replace(
        'return x * rearrange(t, "n -> 1 n")',
        'return (rearrange(x, "b n -> b n") * rearrange(t, "n -> 1 n")).to(x.dtype)',
    )
    assert [line for line, _, _ in _found(both)] == [6]  # a rearranged half tensor is half


_ISLAND = """\
    class SpectralMix(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.w = nn.Parameter(torch.randn(2, n, n))

        def forward(self, x, h):
            dtype = x.dtype
            x = x.float()
            spec = torch.fft.rfft(x, dim=-1)
            re, im = spec.real, spec.imag
            a = torch.zeros(re.shape, device=x.device)
            b = torch.zeros(re.shape, device=x.device)
            a[..., :4] = torch.relu(torch.einsum("bi,io->bo", re[..., :4], self.w[0, :4, :4]))
            b[..., :4] = torch.relu(torch.einsum("bi,io->bo", im[..., :4], self.w[1, :4, :4]))
            mixed = torch.einsum("bi,io->bo", a, self.w[0])
            mixed = mixed - torch.einsum("bi,io->bo", b, self.w[1])
            y = torch.fft.irfft(torch.complex(mixed, im), n=x.shape[-1], dim=-1)
            y = y.type(dtype)
            return y + h
    """


def test_a_buffer_of_an_fp32_island_cast_back_is_not_reported() -> None:
    # the buffers are filled from x.float(); besides it they meet only the weights, which
    # the upcast values meet too, and the island's result is cast back to x's saved dtype
    assert _found(_ISLAND, EVERY) == [(8, "HP201", False)]


def test_a_buffer_of_an_fp32_island_is_reported_without_the_cast_back() -> None:
    uncast = _ISLAND.replace("            y = y.type(dtype)\n", "")
    assert _found(uncast, EVERY) == [(8, "HP201", False), (11, "HP101", True), (12, "HP101", True)]
    # and where a buffer meets a half value that is not the island's, it is its own leak
    half = _ISLAND.replace('einsum("bi,io->bo", a, self.w[0])', 'einsum("bi,io->bo", a, h)')
    assert (11, "HP101", True) in _found(half, EVERY)
