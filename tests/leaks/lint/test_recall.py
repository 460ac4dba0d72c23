"""Leaks whose fp32 travels a longer way: the data flow still finds them. Each model here
is small and written for this test."""

from __future__ import annotations

import textwrap
from pathlib import Path

from halfprec.leaks.lint import LintConfig, lint_paths, lint_source
from support.lint_models import Snippets

HEAD = "import math\nimport torch\nfrom torch import nn\n\n\n"
LINT = Snippets(HEAD)
_found = LINT.found


def test_an_integer_arange_times_a_python_float_name_is_fp32() -> None:
    body = """\
        class Sinusoid(nn.Module):
            def forward(self, t):
                half = self.dim // 2
                freqs = math.log(self.theta) / (half - 1)
                freqs = torch.exp(torch.arange(half, device=t.device) * -freqs)
                angles = t[:, None] * freqs[None, :]
                return torch.cat((angles.sin(), angles.cos()), dim=-1)
        """
    assert _found(body) == [(5, "HP101")]


def test_an_integer_arange_times_an_integer_name_stays_integer() -> None:
    body = """\
        class Offsets(nn.Module):
            def forward(self, x):
                stride = x.shape[1] // 2
                idx = torch.arange(x.shape[0], device=x.device) * stride
                return x.flatten(0, 1)[idx]
        """
    assert _found(body) == []


HELPERS = """\
from blocks import Denoiser


def default(value, fallback):
    if value is not None:
        return value
    return fallback() if callable(fallback) else fallback


"""


def test_a_helper_input_is_floating_when_its_caller_passes_a_floating_tensor() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def noised(self, x_start, level):
                jitter = torch.rand(x_start.shape[0], 1, device=x_start.device)
                return self.net(x_start * jitter, level)

            def forward(self, x, level):
                return self.noised(x, level)
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(16, "HP101")]


def test_a_value_a_helper_returns_from_a_lambda_is_floating() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def forward(self, x, noise=None):
                noise = default(noise, lambda: torch.randn_like(x))
                offset = torch.randn(x.shape[:2], device=x.device)
                noise = noise + 0.1 * offset[:, :, None, None]
                return self.net(noise)
        """
    # `noise += ...` would write the fp32 sum back into the half noise: no leak by the
    # ruling on write-backs (test_fifteenth.py); the rebinding carries fp32 on
    assert _found(HELPERS + textwrap.dedent(body)) == [(17, "HP101")]


def test_a_tensor_a_lambda_hands_to_a_helper_is_followed() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def draw(self, batch):
                return (0.5 * torch.randn((batch,), device=self.device)).exp()

            def forward(self, x, sigma=None):
                sigmas = default(sigma, lambda: self.draw(x.shape[0]))
                return self.net(x + sigmas[:, None, None, None] * torch.randn_like(x))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(16, "HP101")]


def test_a_helper_input_only_an_integer_is_passed_to_stays_integer() -> None:
    body = """\
        class Picker(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def pick(self, ids):
                weights = torch.ones(ids.shape[0], device=ids.device)
                return self.net(ids * weights)

            def forward(self, x):
                return self.pick(torch.arange(x.shape[0], device=x.device))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == []


def test_the_bounds_of_a_random_fill_are_numbers_not_tensors_met() -> None:
    body = """\
        class Crop(nn.Module):
            def area(self, x, scale):
                return x.shape[-1] * torch.empty(1).uniform_(scale[0], scale[1]).item()

            def forward(self, x):
                return x[..., : int(self.area(x, x.new_tensor([0.5, 1.0])))]
        """
    assert _found(body) == []


def test_a_tensor_of_a_scalar_expression_is_zero_dim() -> None:
    body = """\
        def similarity(a, b):
            scale = torch.tensor(1 / 0.07).log()
            return scale.exp() * torch.bmm(a, b)


        class Head(nn.Module):
            def forward(self, x):
                return similarity(self.proj(x), x.transpose(1, 2))
        """
    assert _found(body) == []


def test_a_diagonal_of_a_half_vector_is_half() -> None:
    body = """\
        class Gaussian(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def forward(self, x):
                spread = torch.diag(x.mean(0).clamp(min=1e-6))
                return self.net(spread + 1e-3 * torch.eye(x.shape[1], device=x.device))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(17, "HP101")]


def test_a_sum_with_an_fp32_factory_is_fp32_and_only_that_factory_is_reported() -> None:
    body = """\
        class Gaussian(nn.Module):
            def forward(self, x):
                spread = x.transpose(0, 1) @ x
                spread = spread + 1e-3 * torch.eye(x.shape[1], device=x.device)
                spread = spread + 1e-4 * torch.eye(x.shape[1], device=x.device)
                return torch.linalg.cholesky(spread.float()).to(spread.dtype)
        """
    assert _found(body) == [(4, "HP101")]


def test_a_helper_value_is_followed_three_calls_deep() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def draw(self, batch, device):
                return torch.rand(batch, device=device)

            def mix(self, x_start, t):
                return self.net(x_start * t[:, None])

            def losses(self, x_start, t):
                return self.mix(x_start, t).mean()

            def forward(self, x):
                return self.losses(x, self.draw(x.shape[0], x.device))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(16, "HP101")]


def test_a_tensor_met_with_values_made_from_itself_meets_no_half() -> None:
    body = """\
        class Rope(nn.Module):
            def table(self, hidden_states):
                out = hidden_states.unsqueeze(-1) * 0.5
                return torch.stack([torch.cos(out), -torch.sin(out)], dim=-1)

            def forward(self, x):
                grid = torch.zeros(x.shape[1], 2, device=x.device)
                return x[..., None, None] * self.table(grid).to(x.dtype)
        """
    assert _found(body) == []


def test_a_large_constant_in_the_branch_a_float16_test_excludes_is_not_reported() -> None:
    body = """\
        class Pool(nn.Module):
            def forward(self, x, p_mask):
                if p_mask.dtype == torch.float16:
                    x = x * (1 - p_mask) - 65500 * p_mask
                else:
                    x = x * (1 - p_mask) - 1e30 * p_mask
                if p_mask.dtype != torch.float16:
                    x = x - 1e30 * p_mask
                return x - 1e30 * p_mask
        """
    assert _found(body) == [(9, "HP301")]


def test_a_tensor_kept_as_an_attribute_is_followed_into_the_reads_of_it() -> None:
    body = """\
        class Dropper(nn.Module):
            def masks(self, x):
                keep = torch.ones(self.count, x.shape[-1], device=x.device)
                return nn.functional.dropout(keep, 0.1)

            def forward(self, x):
                if self.stale:
                    self.keep = self.masks(x)
                self.keep = self.keep.roll(1, dims=0)
                return x * self.keep[: x.shape[0]]
        """
    assert _found(body) == [(3, "HP101")]


def test_an_attribute_reset_in_a_helper_is_followed_into_its_reader() -> None:
    body = """\
        class Recurrent(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.proj = nn.Linear(width, width)
                self.register_buffer("noise", torch.ones(16, width))

            def resize(self, x):
                if x.shape[0] != self.noise.shape[0]:
                    self.noise = torch.ones(x.shape[0], x.shape[-1], device=x.device)

            def forward(self, x):
                self.resize(x)
                return self.proj(x) * self.noise
        """
    assert _found(body) == [(9, "HP101")]


def test_an_attribute_cast_where_it_is_read_is_not_reported() -> None:
    body = """\
        class Cached(nn.Module):
            def forward(self, x):
                if self.table is None:
                    self.table = torch.linspace(0, 1, x.shape[-1], device=x.device)
                return x * self.table.to(x.dtype)
        """
    assert _found(body) == []


def test_a_mask_handed_to_each_block_of_a_module_list_is_followed() -> None:
    body = """\
        class Block(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.qk = nn.Linear(width, width)

            def forward(self, x, bias):
                scores = self.qk(x) @ x.transpose(-1, -2)
                return (scores + bias).softmax(-1) @ x


        class Stack(nn.Module):
            def __init__(self, width, depth):
                super().__init__()
                self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])

            def forward(self, x):
                n = x.shape[1]
                bias = torch.zeros(n, n, device=x.device).masked_fill(
                    torch.ones(n, n, device=x.device).triu(1).bool(), -1e4
                )
                for block in self.blocks:
                    x = block(x, bias)
                return x
        """
    assert _found(body) == [(18, "HP101")]


def test_an_fp32_state_of_a_half_lstm_is_reported() -> None:
    body = """\
        class Segment(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.lstm = nn.LSTM(width, width, batch_first=True)

            def forward(self, x, state=None):
                if state is None:
                    h = torch.zeros(1, x.shape[0], x.shape[-1]).to(x.device)
                    state = (h, h)
                out, state = self.lstm(x, state)
                return out
        """
    assert _found(body) == [(8, "HP101")]


def test_a_state_of_a_half_lstm_cast_to_its_input_is_not_reported() -> None:
    body = """\
        class Segment(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.gru = nn.GRU(width, width, batch_first=True)

            def forward(self, x):
                h = torch.zeros(1, x.shape[0], x.shape[-1], device=x.device)
                out, _ = self.gru(x, hx=h.to(x.dtype))
                return out
        """
    assert _found(body) == []


def test_a_binding_in_the_other_branch_of_an_if_does_not_end_the_path() -> None:
    body = """\
        class Shifted(nn.Module):
            def forward(self, x, scale=None):
                if scale is None:
                    bias = torch.zeros(x.shape[-1], device=x.device)
                else:
                    bias = x.new_full((x.shape[-1],), scale)
                return x + bias
        """
    assert _found(body) == [(4, "HP101")]


def test_a_state_made_in_one_branch_of_an_if_reaches_a_half_gru_as_hx() -> None:
    body = """\
        class Segment(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.gru = nn.GRU(width, width)

            def forward(self, x, hx=None):
                if hx is None:
                    h = torch.zeros(1, x.shape[1], x.shape[-1]).to(x.device)
                else:
                    h = hx
                out, h = self.gru(x, hx=h)
                return out, h
        """
    assert _found(body) == [(8, "HP101")]


FLAGGED = """\
from tables import sincos


def table(n, device, extra=False):
    t = sincos(n, device)
    if extra and n > 1:
        t = torch.cat([torch.zeros(1, device=device), t])
    return t


class Embed(nn.Module):
    def forward(self, x):
        return x * table(x.shape[-1], x.device{args})
"""


def test_a_tensor_made_under_a_flag_a_caller_leaves_off_does_not_reach_it() -> None:
    assert _found(FLAGGED.format(args="")) == []
    assert _found(FLAGGED.format(args=", extra=True")) == [(7, "HP101")]


def test_fp32_pieces_appended_to_a_list_and_joined_are_followed() -> None:
    body = """\
        def segments(runs):
            pieces = []
            for value, count in runs:
                pieces.append(torch.full((count,), 0.5) if value else torch.rand(count))
            return pieces


        class Gate(nn.Module):
            def forward(self, x, runs):
                rows = []
                for row in segments(runs):
                    rows.insert(0, row)
                return x * torch.cat(rows)[None]
        """
    assert _found(body) == [(4, "HP101"), (4, "HP101")]


def test_fp32_pieces_of_a_comprehension_or_a_list_sum_are_followed() -> None:
    body = """\
        class Tiles(nn.Module):
            def forward(self, x):
                parts = [torch.ones(x.shape[-1]) for _ in range(x.shape[0])]
                parts += [torch.zeros(x.shape[-1])]
                return x + torch.stack(parts[1:])
        """
    assert _found(body) == [(3, "HP101"), (4, "HP101")]


def test_a_tensor_iterated_from_a_dict_of_pieces_is_followed() -> None:
    body = """\
        class Offsets(nn.Module):
            def forward(self, x):
                bank = {"lo": torch.randn(x.shape[-1]), "hi": x.mean(0)}
                for shift in bank.values():
                    x = x - shift
                return x
        """
    assert _found(body) == [(3, "HP101")]


def test_a_list_of_integer_pieces_stays_integer() -> None:
    body = """\
        class Picker(nn.Module):
            def forward(self, x):
                picks = []
                for n in self.sizes:
                    picks.append(torch.randint(0, x.shape[0], (n,)))
                return x[torch.cat(picks)]
        """
    assert _found(body) == []


def test_an_integer_arange_bound_to_a_name_and_divided_later_is_fp32() -> None:
    body = """\
        def ramp(steps, offset, device, base=500):
            ticks = offset + torch.arange(steps, device=device)[:, None]
            k = torch.arange(8, device=device)
            angle = ticks / base ** (k / 7)
            return torch.cat([angle.sin(), angle.cos()], dim=-1)


        class Clock(nn.Module):
            def forward(self, x):
                return x + ramp(x.shape[0], 3, x.device)
        """
    assert _found(body) == [(2, "HP101"), (3, "HP101")]


def test_a_layer_attribute_that_may_be_an_identity_has_a_half_output() -> None:
    body = """\
        class Branches(nn.Module):
            def __init__(self, width, norm=True):
                super().__init__()
                if norm:
                    self.pre = nn.LayerNorm(width)
                else:
                    self.pre = nn.Identity()

            def forward(self, x, side):
                side = self.pre(side)
                shift = 0.5 * torch.arange(side.shape[1]).view(1, -1, 1)
                return x + (side * shift.to(side.device)).to(x.dtype)
        """
    assert _found(body) == [(11, "HP101")]


def test_an_integer_tensor_times_a_half_expression_stays_half() -> None:
    body = """\
        class Boxes(nn.Module):
            def forward(self, x, image):
                scale = torch.tensor([image.shape[-1], image.shape[-2]], device=x.device)
                grid = torch.tensor(image.shape[-2:]).to(x)
                return (x[:, :2] - 0.5 * x[:, 2:]) * scale + x[:, :2] / (grid - 1)
        """
    assert _found(body) == []


def test_a_module_with_nothing_floating_has_no_half_output_to_leak_into() -> None:
    body = """\
        class Shuffle(nn.Module):
            def forward(self, sizes: tuple, same: bool = False):
                if sizes[0] == 0:
                    order = torch.zeros([0, sizes[1]])
                else:
                    order = torch.stack([torch.randperm(sizes[1]) for _ in range(sizes[0])])
                return {"order": order}
        """
    assert _found(body) == []


def test_an_integer_arange_bound_to_a_name_and_used_as_an_index_stays_integer() -> None:
    body = """\
        class Rows(nn.Module):
            def forward(self, x):
                rows = 1 + torch.arange(x.shape[0] - 1, device=x.device)
                first = rows // 2
                return x[first] + x[rows]
        """
    assert _found(body) == []


def test_a_tensor_kept_as_another_objects_attribute_is_followed() -> None:
    body = """\
        class Beams:
            def __init__(self, tokens, totals):
                self.tokens = tokens
                self.totals = totals


        class Search(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.head = nn.Linear(width, width)

            def start(self, x):
                return Beams(x.new_zeros(x.shape[0]).long(), torch.zeros(x.shape[0]))

            def step(self, beams, x):
                beams.totals = beams.totals[:, None] + self.head(x).log_softmax(-1)
                return beams

            def forward(self, x):
                return self.step(self.start(x), x).totals
        """
    assert _found(body) == [(13, "HP101")]


def test_a_tensor_through_a_partial_held_as_an_attribute_is_followed() -> None:
    # a control: a partial held as an attribute hands its input on (imagen's misses are not
    # this, but images whose dtype the lint cannot see)
    body = """\
        from functools import partial
        from einops import rearrange


        class Sampler(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.net = nn.Conv2d(width, width, 1)
                self.pad = partial(rearrange, pattern="b -> b 1 1 1")

            def levels(self, n):
                return (0.3 * torch.randn(n, device=self.net.weight.device)).exp()

            def forward(self, images):
                noise = torch.randn_like(images)
                scaled = self.pad(self.levels(images.shape[0]))
                return self.net(images + scaled * noise)
        """
    assert _found(body) == [(12, "HP101")]


def test_a_tensor_handed_on_in_a_kwargs_dict_is_followed() -> None:
    body = """\
        class Mixer(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.proj = nn.Linear(width, width)

            def blend(self, x, weight=None, scale=1):
                return self.proj(x) * weight * scale

            def forward(self, x):
                extra = dict(scale=2, weight=torch.rand(x.shape[-1]))
                return self.blend(x, **extra)
        """
    assert _found(body) == [(10, "HP101")]


def test_a_fill_value_an_isinstance_test_makes_a_float_is_fp32() -> None:
    body = """\
        class Denoise(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.net = nn.Linear(width, width)

            def forward(self, x, level):
                if isinstance(level, float):
                    level = torch.full((x.shape[0], 1), level, device=x.device)
                return self.net(x * level)
        """
    assert _found(body) == [(8, "HP101")]


def test_a_tensor_returned_in_an_output_record_reaches_the_output() -> None:
    body = """\
        from records import Result


        class Heads(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.score = nn.Linear(width, 1)

            def forward(self, x, boxes=None):
                if boxes is None:
                    return Result(scores=self.score(x), boxes=torch.zeros(x.shape[0], 4))
                return Result(scores=self.score(x), boxes=boxes)
        """
    assert _found(body) == [(11, "HP101")]


def test_only_the_field_of_a_record_that_holds_the_tensor_is_followed() -> None:
    body = """\
        from records import Result


        class Stack(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.proj = nn.Linear(width, width)

            def forward(self, x):
                keep = torch.ones(x.shape[0], x.shape[1], device=x.device)
                return Result(hidden=self.proj(x), keep=keep)


        class Top(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.stack = Stack(width)
                self.head = nn.Linear(width, 2)

            def forward(self, x):
                out = self.stack(x)
                return self.head(out.hidden + out[0])
        """
    assert _found(body) == []


def test_a_mask_handed_to_blocks_appended_to_a_module_list_is_followed() -> None:
    body = """\
        class Layer(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.mix = nn.Linear(width, width)

            def forward(self, x, gate):
                return self.mix(x) * gate


        class Tower(nn.Module):
            def __init__(self, width, depth):
                super().__init__()
                self.layers = nn.ModuleList()
                for _ in range(depth):
                    self.layers.append(Layer(width))

            def forward(self, x):
                gate = torch.rand(x.shape[-1], device=x.device) > 0.1
                scale = torch.ones(x.shape[-1], device=x.device) * 2
                for i in range(len(self.layers)):
                    x = self.layers[i](x, gate * scale)
                return x
        """
    assert _found(body) == [(19, "HP101")]


def test_an_fp32_default_handed_back_by_get_or_getattr_is_followed() -> None:
    body = """\
        class Forecaster(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.embed = nn.Linear(1, width)
                self.cond = nn.Linear(width, width)

            def forward(self, batch):
                past = batch["past"]
                n, steps = past.shape[0], past.shape[1]
                target = batch.get("target", torch.zeros(n, steps, 1, device=past.device))
                cond = getattr(self, "cond_cache", torch.ones(n, steps, 4, device=past.device))
                known = batch.get("known")
                known = known if known is not None else torch.ones(n, steps, 1, device=past.device)
                return self.embed(target) + self.cond(cond) * known
        """
    assert _found(body) == [(10, "HP101"), (11, "HP101"), (13, "HP101")]


def test_a_default_for_a_key_read_before_is_never_taken() -> None:
    body = """\
        class Forecaster(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.embed = nn.Linear(1, width)

            def forward(self, batch):
                n, steps = batch["past"].shape[:2]
                past = batch.get("past", torch.zeros(n, steps, 1, device=batch["past"].device))
                return self.embed(past)
        """
    assert _found(body) == []


def test_empty_defaults_joined_with_half_features_are_fp32() -> None:
    body = """\
        class Selector(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.select = nn.Sequential(nn.Linear(width, width), nn.Sigmoid())

            def forward(self, batch):
                cont = batch["cont"]
                cats = batch.get("cats", torch.zeros(cont.shape[0], cont.shape[1], 0))
                feats = torch.cat([cont, cats], dim=-1)
                return feats * self.select(feats)
        """
    assert _found(body) == [(8, "HP101")]


EINOPS = "from einops import einsum, rearrange, reduce\n"


def test_einops_functions_keep_the_promoted_dtype_of_their_inputs() -> None:
    body = """\
        class Decorrelation(nn.Module):
            def forward(self, tokens):
                dim = tokens.shape[-1]
                tokens = rearrange(tokens, "b n d -> b 1 n d")
                cov = einsum(tokens, tokens, "b s n d, b s n e -> b s d e")
                off = cov.pow(2) * (1.0 - torch.eye(dim, device=tokens.device))
                return reduce(off, "b s d e -> b", "sum").mean()


        class Mixer(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.out = nn.Linear(width, width)

            def forward(self, x):
                basis = torch.randn(x.shape[-1], x.shape[-1], device=x.device)
                mixed = einsum(x, basis, "b n d, d e -> b n e")
                return self.out(reduce(mixed, "b n e -> b e", "mean"))
        """
    source = HEAD + EINOPS + textwrap.dedent(body)
    found = [(f.line - 6, f.code) for f in lint_source(source)]
    assert found == [(6, "HP101"), (16, "HP101")]


def test_an_einops_product_of_a_table_with_itself_cast_back_is_not_reported() -> None:
    body = """\
        class Gram(nn.Module):
            def forward(self, x):
                table = torch.linspace(0, 1, x.shape[-1], device=x.device)
                gram = einsum(table, table, "i, j -> i j")
                return x @ gram.to(x.dtype)
        """
    source = HEAD + EINOPS + textwrap.dedent(body)
    assert lint_source(source) == []


def test_an_integer_grid_stacked_then_made_fp32_into_a_layer_factory_is_fp32() -> None:
    body = """\
        def position_mlp(width):
            return nn.Sequential(nn.Linear(2, width), nn.ReLU(), nn.Linear(width, 1))


        class WindowBias(nn.Module):
            def __init__(self, width, window):
                super().__init__()
                self.window = window
                self.mlp = position_mlp(width)

            def forward(self, scores):
                span = torch.arange(-self.window, self.window + 1, device=scores.device)
                grid = torch.stack(torch.meshgrid(span, span, indexing="ij"))
                grid = rearrange(grid, "c i j -> (i j) c").t()
                bias = self.mlp(grid.t().float())
                return scores + bias.squeeze(-1)
        """
    source = HEAD + EINOPS + textwrap.dedent(body)
    found = [(f.line - 6, f.code) for f in lint_source(source)]
    assert found == [(12, "HP101")]


def test_an_integer_grid_made_fp32_and_cast_back_is_not_reported() -> None:
    body = """\
        class WindowBias(nn.Module):
            def __init__(self, window):
                super().__init__()
                self.window = window
                self.mlp = nn.Linear(2, 1)

            def forward(self, scores):
                span = torch.arange(-self.window, self.window + 1, device=scores.device)
                grid = torch.stack(torch.meshgrid(span, span, indexing="ij")).flatten(1).t()
                return scores + self.mlp(grid.float().to(scores.dtype))
        """
    assert _found(body) == []


VIT = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x)


class Positions(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.table = nn.Embedding(64, width)

    def forward(self, x):
        return self.table.weight[: x.shape[1]]
"""

MAE = """\
import torch
from torch import nn
from einops import rearrange
from {module} import Block, Positions


class Autoencoder(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.embed = nn.Linear(4, width)
        self.decoder = Block(width)
        self.positions = Positions(width)

    def forward(self, x):
        tokens = self.embed(x)
        b, n, d = tokens.shape
        slots = torch.zeros(b, 2 * n, d, device=x.device)
        slots[:, :n] = tokens
        shape_only = torch.zeros(b, 2 * n, d, device=x.device)
        return self.decoder(slots) + self.positions(shape_only)
"""


def test_a_submodule_whose_class_another_file_defines_is_followed(tmp_path: Path) -> None:
    for module, where in ((".vit", "pkg/vit.py"), ("pkg.layers", "pkg/layers/__init__.py")):
        root = tmp_path / module.strip(".")
        (root / "pkg" / "layers").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "layers" / "__init__.py").write_text(
            "from .blocks import Block, Positions\n"
        )
        (root / "pkg" / "layers" / "blocks.py").write_text(VIT)
        (root / "pkg" / "vit.py").write_text(VIT)
        (root / "pkg" / "mae.py").write_text(MAE.format(module=module))
        report = lint_paths([root], LintConfig())
        found = [(Path(f.path).name, f.line) for r in report.files for f in r.findings]
        assert found == [("mae.py", 17)], where


def test_a_class_of_a_package_outside_the_tree_stays_unseen(tmp_path: Path) -> None:
    (tmp_path / "mae.py").write_text(MAE.format(module="vitlib.vit"))
    report = lint_paths([tmp_path], LintConfig())
    assert [f for r in report.files for f in r.findings] == []
