"""An fp32 tensor handed to a submodule however the module reaches it: an attribute that may
be ``None``, a loop over a ``ModuleList``/``ModuleDict`` of layers, ``getattr(self, name)``,
``super().forward``. Each model here is small and written for this test."""

from __future__ import annotations

import textwrap

import pytest

from support.lint_models import HEAD, Snippets

LINT = Snippets(HEAD)
_found = LINT.found


def _line_of(body: str, text: str) -> int:
    """The line of ``body`` (from 1) that holds ``text``."""
    return next(i for i, line in enumerate(textwrap.dedent(body).splitlines(), 1) if text in line)


MAYBE_NONE = {
    "conditional expression": """\
        class Bias(nn.Module):
            def __init__(self, learned=True):
                super().__init__()
                self.mlp = nn.Sequential(nn.Linear(2, 8), nn.SiLU()) if learned else None

            def forward(self, x, n):
                table = torch.ones(n, n, 2)
                if self.mlp is not None:
                    return x + self.mlp(table)
                return x
        """,
    "None first, a layer under an if": """\
        class Bias(nn.Module):
            def __init__(self, learned=True):
                super().__init__()
                self.mlp = None
                if learned:
                    self.mlp = nn.Linear(2, 8)

            def forward(self, x, n):
                table = torch.ones(n, n, 2)
                if self.mlp is not None:
                    return x + self.mlp(table)
                return x
        """,
}


@pytest.mark.parametrize("body", MAYBE_NONE.values(), ids=list(MAYBE_NONE))
def test_a_layer_attribute_that_may_be_none_meets_the_tensor(body: str) -> None:
    assert _found(body) == [(_line_of(body, "torch.ones"), "HP101")]


CONTAINERS = {
    "loop over a ModuleList of Sequential": """\
        class Rel(nn.Module):
            def __init__(self, depth):
                super().__init__()
                self.net = nn.ModuleList([])
                self.net.append(nn.Sequential(nn.Linear(1, 8), nn.SiLU()))
                for _ in range(depth):
                    self.net.append(nn.Sequential(nn.Linear(8, 8), nn.SiLU()))

            def forward(self, x, n):
                pos = torch.linspace(-1, 1, n)[:, None]
                for layer in self.net:
                    pos = layer(pos)
                return x + pos
        """,
    "enumerate over a comprehension": """\
        class Rel(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = nn.ModuleList([nn.Sequential(nn.Linear(8, 8)) for _ in range(2)])

            def forward(self, x, n):
                pos = torch.randn(n, 8)
                for i, layer in enumerate(self.net):
                    pos = layer(pos)
                return x + pos
        """,
    "zip, weightless first": """\
        class Rel(nn.Module):
            def __init__(self):
                super().__init__()
                self.acts = nn.ModuleList([nn.GELU(), nn.Tanh()])
                self.projs = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])

            def forward(self, x, n):
                pos = torch.randn(n, 8)
                for act, proj in zip(self.acts, self.projs):
                    pos = proj(act(pos))
                return x + pos
        """,
    "ModuleDict items": """\
        class Heads(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})

            def forward(self, x, n):
                query = torch.randn(n, 8)
                outs = {}
                for name, head in self.heads.items():
                    outs[name] = head(query) + x
                return outs
        """,
    "a slice of a ModuleList built from a local list": """\
        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                layers = []
                for _ in range(3):
                    layers.append(nn.Linear(8, 8))
                self.layers = nn.ModuleList(layers)

            def forward(self, x, n):
                h = torch.ones(n, 8)
                for layer in reversed(self.layers[1:]):
                    h = layer(h)
                return x + h
        """,
    "getattr(self, f-string)": """\
        class Named(nn.Module):
            def __init__(self):
                super().__init__()
                self.block0 = nn.Linear(8, 8)
                self.block1 = nn.Linear(8, 8)

            def forward(self, x, n):
                h = torch.ones(n, 8)
                for i in range(2):
                    h = getattr(self, f"block{i}")(h)
                return x + h
        """,
    "super().forward of a layer": """\
        class Shifted(nn.Linear):
            def forward(self, x):
                offset = torch.ones(x.shape[0], self.in_features)
                return super().forward(offset) + x
        """,
}


@pytest.mark.parametrize("body", CONTAINERS.values(), ids=list(CONTAINERS))
def test_a_tensor_given_to_a_layer_through_a_container_meets_half_weights(body: str) -> None:
    assert _found(body) == [(_line_of(body, "= torch."), "HP101")]


def test_a_loop_over_weightless_layers_hands_an_index_on() -> None:
    body = """\
        class Pick(nn.Module):
            def __init__(self):
                super().__init__()
                self.acts = nn.ModuleList([nn.Identity(), nn.Dropout(0.1)])
                self.norm = nn.LayerNorm(8) if False else None

            def forward(self, x):
                idx = torch.arange(x.shape[0])
                for act in self.acts:
                    idx = act(idx)
                return x[idx]
        """
    assert _found(body) == []


def test_a_join_cast_back_before_any_use_is_not_reported() -> None:
    body = """\
        class Pad(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(9, 8)

            def forward(self, x):
                pad = torch.zeros(x.shape[0], 1)
                h = torch.cat([x, pad], dim=-1).to(x.dtype)
                return self.proj(h)
        """
    assert _found(body) == []


def test_a_join_going_on_uncast_is_reported() -> None:
    body = """\
        class Pad(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = make_body()

            def forward(self, x):
                pad = torch.zeros(x.shape[0], 1)
                h = torch.cat([x, pad], dim=-1)
                return self.body(h)
        """
    assert _found(body) == [(7, "HP101")]


MORE_CONTAINERS = {
    "a ModuleList extended": """\
        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList()
                self.layers.extend([nn.Conv1d(8, 8, 3, padding=1) for _ in range(2)])

            def forward(self, x):
                h = torch.ones(x.shape[0], 8, x.shape[-1])
                for layer in self.layers:
                    h = layer(h)
                return x + h
        """,
    "a ModuleList of ModuleLists, two loops deep": """\
        class Stages(nn.Module):
            def __init__(self):
                super().__init__()
                self.stages = nn.ModuleList(
                    [nn.ModuleList([nn.GELU(), nn.Linear(8, 8)]) for _ in range(2)]
                )

            def forward(self, x):
                h = torch.ones(x.shape[0], 8)
                for stage in self.stages:
                    for layer in stage:
                        h = layer(h)
                return x + h
        """,
    "layers made by setattr, called by getattr": """\
        class Named(nn.Module):
            def __init__(self, depth):
                super().__init__()
                for i in range(depth):
                    setattr(self, f"stage{i}", nn.Linear(8, 8))
                self.depth = depth

            def forward(self, x):
                h = torch.randn(x.shape[0], 8)
                for i in range(self.depth):
                    h = getattr(self, f"stage{i}")(h)
                return x + h
        """,
}


@pytest.mark.parametrize("body", MORE_CONTAINERS.values(), ids=list(MORE_CONTAINERS))
def test_layers_added_by_extend_or_setattr_or_nested_meet_the_tensor(body: str) -> None:
    assert _found(body) == [(_line_of(body, "= torch."), "HP101")]


def test_a_function_of_the_file_held_as_an_attribute_is_followed() -> None:
    body = """\
        def cosine_schedule(t):
            return torch.cos(t * 1.5708) ** 2


        class Noiser(nn.Module):
            def __init__(self):
                super().__init__()
                self.schedule = cosine_schedule

            def forward(self, x):
                t = torch.rand(x.shape[0], 1)
                alpha = self.schedule(t)
                return x * alpha
        """
    assert _found(body) == [(11, "HP101")]


def test_an_attribute_that_is_a_function_or_a_module_is_not_entered_as_the_function() -> None:
    body = """\
        def cosine_schedule(t):
            return t.long()


        class Noiser(nn.Module):
            def __init__(self, learned=False):
                super().__init__()
                self.schedule = cosine_schedule
                if learned:
                    self.schedule = nn.Linear(1, 1)

            def forward(self, x):
                t = torch.rand(x.shape[0], 1)
                return x * self.schedule(t)
        """
    assert _found(body) == [(13, "HP101")]


def test_a_join_read_only_for_its_shape_still_met_half() -> None:
    body = """\
        class Decoder(nn.Module):
            def forward(self, x, horizon):
                start = torch.zeros(x.shape[0], horizon, 1)
                start = torch.cat([x[:, -2:, :], start], dim=1)
                return x.new_zeros(start.shape[0], horizon, start.shape[2]) + x[:, :horizon]
        """
    assert _found(body) == [(3, "HP101")]
