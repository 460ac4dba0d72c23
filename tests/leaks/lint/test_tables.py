"""Tables made fp32 from integers or from nothing: a comparison of an integer ``arange``
made fp32 by ``.to(torch.float)``, such a table meeting its twin made the same way, an
empty ``torch.tensor([])`` seeding a ``torch.cat`` loop, and a list filled by ``append`` in
a loop read after it. Each model here is small and written for this test; the torch checks
show what the model does in half."""

from __future__ import annotations

import numpy
import pytest
import torch

from support.lint_models import HEAD, Snippets

LINT = Snippets(HEAD)
_found, _module = LINT.lines, LINT.model


LOG_MASK = """\
    class Pairs(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, items):
            order = torch.arange(items.shape[0])
            order = order[:, None] - order[None, :]
            bias = torch.log((order < 0).to(torch.float))
            return self.proj(items) @ items.T + bias
    """


def test_a_compared_integer_arange_made_fp32_meets_half_scores() -> None:
    model = _module(LOG_MASK, "Pairs")(4).half()
    assert model(torch.randn(3, 4).half()).dtype == torch.float32
    assert _found(LOG_MASK) == [7]


def test_the_same_mask_cast_to_the_scores_dtype_stays_silent() -> None:
    cast = LOG_MASK.replace(".to(torch.float))", ".to(items.dtype))")
    assert _found(cast) == []


WINDOWS = """\
    class Window(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.out = nn.Linear(d, 2)

        def forward(self, tokens, centres):
            offset = centres[:, None] - torch.arange(tokens.shape[0])[None, :]
            after = torch.log((offset <= 0).to(torch.float))
            before = torch.log((offset >= 0).to(torch.float))
            allowed = torch.stack((after, before), dim=2)
            return self.out(tokens)[None] + allowed
    """


def test_two_tables_made_fp32_from_one_integer_arange_meet_half_together() -> None:
    model = _module(WINDOWS, "Window")(4).half()
    out = model(torch.randn(5, 4).half(), torch.tensor([1, 3]))
    assert out.dtype == torch.float32
    assert _found(WINDOWS) == [7]


def test_an_upcast_of_half_values_still_silences_a_table_it_meets() -> None:
    upcast = """\
        class Mixer(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, h):
                g = self.proj(h).float()
                mixed = torch.stack((g, torch.ones(h.shape, device=h.device)))
                return mixed.sum(0).to(h.dtype)
        """
    assert _found(upcast) == []


SEEDED = """\
    class Merge(nn.Module):
        def __init__(self, d, n):
            super().__init__()
            self.branches = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])
            self.merge = nn.Conv1d(n, 1, 1)

        def forward(self, x):
            outs = []
            for branch in self.branches:
                outs.append(branch(x))
            acc = torch.tensor([], device=x.device)
            for i in range(len(outs)):
                acc = torch.cat((acc, outs[i].unsqueeze(1)), dim=1)
            return self.merge(acc).squeeze(1)
    """


def test_an_empty_fp32_seed_of_a_cat_loop_over_an_appended_list_is_reported() -> None:
    model = _module(SEEDED, "Merge")(4, 3).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).half())  # the fp32 concatenation meets the half conv
    assert torch.cat((torch.tensor([]), torch.ones(2, 1).half()), 1).dtype == torch.float32
    assert _found(SEEDED) == [11]


def test_the_same_seed_made_in_the_inputs_dtype_stays_silent() -> None:
    seeded = SEEDED.replace("torch.tensor([], device=x.device)", "x.new_tensor([])")
    assert _found(seeded) == []


def test_a_list_appended_in_a_loop_is_half_after_the_loop() -> None:
    appended = """\
        class Levels(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.down = nn.Linear(d, d)

            def forward(self, x):
                levels = []
                for _ in range(3):
                    x = self.down(x)
                    levels.append(x)
                scale = torch.rand(x.shape[-1], device=x.device)
                return (levels[-1] * scale).to(x.dtype)
        """
    assert _found(appended) == [11]  # the product is computed in fp32, then rounded


def test_a_list_appended_with_integers_is_no_template_for_a_leak() -> None:
    counted = """\
        class Counts(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                sizes = []
                for row in x:
                    sizes.append(row.shape[0])
                lengths = torch.tensor(sizes)
                return self.proj(x), lengths
        """
    assert _found(counted) == []


FOURIER = """\
    from convlib import Projection


    class Fourier(nn.Module):
        def __init__(self, hidden, dim):
            super().__init__()
            self.proj = Projection(2 * hidden, dim)
            self.hidden = hidden

        def forward(self, rows: int, cols: int):
            device = self.proj.inner.weight.device
            ys = torch.arange(1, rows + 1, device=device).float()
            xs = torch.arange(1, cols + 1, device=device).float()
            grid = torch.stack(torch.meshgrid(ys, xs, indexing="ij"))
            return self.proj(grid.repeat(self.hidden, 1, 1)[None])
    """


def test_an_fp32_table_into_a_layer_of_another_library_whose_weights_are_read() -> None:
    assert _found(FOURIER) == [12, 13]


def test_the_same_layer_whose_weights_are_not_read_is_not_assumed_weighted() -> None:
    unread = FOURIER.replace("self.proj.inner.weight.device", "torch.device('cpu')")
    assert _found(unread) == []


MEDIANS = """\
    class Decay(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.decay = nn.Linear(d, d)

        def forward(self, gaps, medians: dict):
            centre = torch.tensor(list(medians.values())).float()
            return self.decay(gaps - centre.to(gaps.device))
    """


def test_a_tensor_of_a_listed_sequence_made_fp32_meets_half_values() -> None:
    model = _module(MEDIANS, "Decay")(2).half()
    with pytest.raises(RuntimeError):
        model(torch.rand(3, 2).half(), {"a": 1, "b": 2})  # fp32 into the half Linear
    assert _found(MEDIANS) == [7]


RANK_WEIGHTS = """\
    class RankWeights(nn.Module):
        def forward(self, scores):
            ranks = torch.arange(1, scores.shape[1] + 1, device=scores.device)
            gains = torch.pow(2.0, scores.shape[1] - ranks) - 1
            return scores * gains
    """


def test_an_integer_arange_raised_to_a_float_base_by_torch_pow_meets_half_scores() -> None:
    model = _module(RANK_WEIGHTS, "RankWeights")()
    assert model(torch.rand(2, 3).half()).dtype == torch.float32
    assert _found(RANK_WEIGHTS) == [3]


def test_an_integer_power_of_an_integer_arange_stays_integer() -> None:
    integer = RANK_WEIGHTS.replace("torch.pow(2.0,", "torch.pow(2,")
    assert _module(integer, "RankWeights")()(torch.rand(2, 3).half()).dtype == torch.float16
    assert _found(integer) == []


ALIASED = """\
    from functools import partial

    if hasattr(torch, "floor_divide"):
        halve = torch.floor_divide
    else:
        halve = partial(torch.div, rounding_mode="floor")


    class Waves(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            freq = torch.arange(x.shape[-1], device=x.device).float()
            freq = halve(freq, 2)
            return self.proj(x) * torch.sin(freq)
    """


def test_a_table_through_a_torch_function_under_another_name_meets_half() -> None:
    model = _module(ALIASED, "Waves")(4).half()
    assert model(torch.rand(2, 4).half()).dtype == torch.float32
    assert _found(ALIASED) == [15]


EXTERNAL = """\
    class Mixer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.vocab = nn.Embedding(10, d)
            self.mix = nn.Linear(d, d)

        def forward(self, ids, arrays):
            feats = [torch.tensor(a).to(self.mix.weight.device) for a in arrays]
            return self.mix(torch.stack(feats)) + self.vocab(torch.tensor(ids))
    """


def test_a_tensor_of_outside_data_given_to_a_layer_with_weights_is_reported() -> None:
    model = _module(EXTERNAL, "Mixer")(4).half()
    with pytest.raises(RuntimeError):  # numpy float32 arrays: fp32 into the half Linear
        model([1, 2], [numpy.ones(4, dtype=numpy.float32)] * 2)
    assert _found(EXTERNAL) == [8]  # the embedding's indices are integers, as they must be


def test_a_tensor_of_outside_data_met_only_by_arithmetic_stays_silent() -> None:
    body = """\
        class Offset(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x, steps):
                return self.proj(x) + torch.tensor(steps, device=x.device)[:, None]
        """
    assert _found(body) == []  # integer steps keep the sum half; floats would not


def test_a_tensor_of_outside_data_given_by_keyword_to_index_copy_is_followed() -> None:
    body = """\
        class Rows(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.rows = nn.Linear(d, d)

            def forward(self, x, picked):
                index = torch.tensor(picked).to(x.device)
                return x.index_copy(dim=0, index=index, source=self.rows(x[index]))
        """
    assert _found(body) == []  # an index, given by keyword only: no positional source


PRIOR = """\
    class Latent(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.enc = nn.Linear(d, d)
            self.prior = None

        def make_prior(self, d, device):
            return torch.distributions.Normal(
                loc=torch.zeros(d, device=device), scale=torch.ones(d, device=device)
            )

        def forward(self, x):
            if self.prior is None:
                self.prior = self.make_prior(x.shape[-1], x.device)
            z = self.enc(x)
            return self.prior.log_prob(z).sum(-1)
    """


def test_a_distribution_with_fp32_parameters_scores_half_latents() -> None:
    model = _module(PRIOR, "Latent")(4).half()
    assert model(torch.rand(2, 4).half()).dtype == torch.float32
    assert _found(PRIOR) == [9, 9]


def test_a_distribution_with_parameters_in_the_latents_dtype_stays_silent() -> None:
    typed = PRIOR.replace("device=device)", "device=device, dtype=dtype)")
    typed = typed.replace(
        "def make_prior(self, d, device):", "def make_prior(self, d, device, dtype):"
    )
    typed = typed.replace("(x.shape[-1], x.device)", "(x.shape[-1], x.device, x.dtype)")
    assert _found(typed) == []


SINCOS = """\
    class Grid(nn.Module):
        def forward(self, tokens):
            h, w, d = tokens.shape[1:]
            ys, xs = torch.meshgrid(
                torch.arange(h, device=tokens.device),
                torch.arange(w, device=tokens.device),
                indexing="ij",
            )
            omega = 1.0 / 100 ** (torch.arange(d // 2, device=tokens.device) / (d // 2))
            ys = ys.flatten()[:, None] * omega[None, :]
            xs = xs.flatten()[:, None] * omega[None, :]
            pos = torch.cat((ys.sin(), xs.cos()), dim=1)
            return tokens.flatten(1, 2) + pos
    """


def test_an_integer_grid_times_a_frequency_table_made_from_integers_is_fp32() -> None:
    assert _module(SINCOS, "Grid")()(torch.rand(1, 2, 3, 4).half()).dtype == torch.float32
    assert _found(SINCOS) == [5, 6, 9]


FLOAT_ATTRIBUTES = """\
    class Decayed(nn.Module):
        def __init__(self, d, decay: float = 0.9, eps=1e-4):
            super().__init__()
            self.proj = nn.Linear(d, d)
            self.decay = decay
            self.eps = eps
            self.fill = 0.5

        def forward(self, x):
            weights = torch.pow(self.decay, torch.arange(x.shape[0], device=x.device))
            floor = torch.tensor([self.eps] * x.shape[-1], device=x.device)
            bias = torch.full((x.shape[-1],), self.fill, device=x.device)
            return self.proj(x) * weights[:, None] + floor + bias
    """


def test_factories_of_the_class_float_attributes_are_fp32() -> None:
    assert _module(FLOAT_ATTRIBUTES, "Decayed")(3)(torch.rand(2, 3)).dtype == torch.float32
    assert _module(FLOAT_ATTRIBUTES, "Decayed")(3).half()(torch.rand(2, 3).half()).dtype == (
        torch.float32
    )
    assert _found(FLOAT_ATTRIBUTES) == [10, 11, 12]


def test_factories_of_the_class_integer_attributes_stay_silent() -> None:
    body = FLOAT_ATTRIBUTES.replace("decay: float = 0.9, eps=1e-4", "decay: int = 2, eps=1")
    body = body.replace("self.fill = 0.5", "self.fill = 1")
    assert _found(body) == []


def test_a_copy_of_a_tensor_parameter_keeps_its_dtype() -> None:
    body = """\
        class Static(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x, real: torch.Tensor):
                return self.proj(torch.tensor(real)) + x
        """
    assert _found(body) == []  # torch.tensor(t) copies t in t's own dtype


def test_a_copy_of_a_half_tensor_keeps_its_dtype() -> None:
    body = """\
        class Twice(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                h = self.proj(x)
                return self.proj(torch.tensor(h.detach()))
        """
    assert _found(body) == []
