"""A tensor handed to a container by a method call is held by it, as a subscript store
holds it: ``graph.nodes.update({"h": t})`` of an object's dict attribute (a graph library's
node data), ``self.store.update(h=t)``, ``slots.setdefault("b", t)`` and
``setattr(ctx, "offset", t)`` of another object. Each model here is small and written for
this test; the torch checks show what the model does in half."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from support.lint_models import hp101_lines, model_class

GRAPH = """\
    class NodeNet(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, graph, x):
            graph.nodes.update({"feat": x, "state": torch.zeros(x.shape[0], x.shape[1])})
            return self.proj(graph.nodes["state"] + graph.nodes["feat"])
    """


def test_a_tensor_given_to_an_objects_dict_by_update_is_reported() -> None:
    model = model_class(GRAPH, "NodeNet")(4).half()
    with pytest.raises(RuntimeError):  # fp32 state + half features: fp32 into half weights
        model(SimpleNamespace(nodes={}), torch.randn(2, 4).half())
    assert hp101_lines(GRAPH) == [7]


def test_the_update_cast_before_the_layer_stays_silent() -> None:
    cast = GRAPH.replace('"feat": x, ', "").replace(
        'graph.nodes["state"] + graph.nodes["feat"]', 'x + graph.nodes["state"].to(x.dtype)'
    )
    assert hp101_lines(cast) == []


def test_keyword_update_of_an_objects_dict_is_reported() -> None:
    body = """\
        class EdgeNet(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x, graph):
                graph.edges.update(weight=torch.rand(x.shape[0], 1))
                return self.proj(x * graph.edges["weight"])
        """
    model = model_class(body, "EdgeNet")(4).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).half(), SimpleNamespace(edges={}))
    assert hp101_lines(body) == [7]


def test_keyword_update_of_a_dict_the_module_keeps_is_reported() -> None:
    body = """\
        class Cache(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)
                self.store = {}

            def forward(self, x):
                self.store.update(state=torch.zeros(x.shape[0], x.shape[1]))
                return self.proj(x) + self.store["state"]
        """
    model = model_class(body, "Cache")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float32
    assert hp101_lines(body) == [8]


SLOTS = """\
    class Slots(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            slots = {}
            slots.setdefault("bias", torch.ones(x.shape[-1]))
            return self.proj(x) * slots["bias"]
    """


def test_a_tensor_given_as_a_setdefault_default_is_held_by_the_dict() -> None:
    model = model_class(SLOTS, "Slots")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float32
    assert hp101_lines(SLOTS) == [8]


def test_a_setdefault_whose_key_another_entry_holds_reads_no_tensor() -> None:
    other = SLOTS.replace(' * slots["bias"]', ' * slots["scale"]').replace(
        "slots = {}", "slots = {'scale': x.new_ones(x.shape[-1])}"
    )
    assert hp101_lines(other) == []


def test_a_tensor_set_on_another_object_by_setattr_is_reported() -> None:
    body = """\
        class Shift(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x, ctx):
                setattr(ctx, "offset", torch.ones(x.shape))
                return self.proj(x + ctx.offset)
        """
    model = model_class(body, "Shift")(4).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).half(), SimpleNamespace())
    assert hp101_lines(body) == [7]


PICKED = """\
    def pick(fields, idx):
        return {k: v[idx] for k, v in fields.items()}


    class Picked(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            fields = {"bias": torch.ones(x.shape[0], x.shape[1])}
            kept = pick(fields, torch.arange(x.shape[0]))
            return self.proj(x) + kept["bias"]
    """


def test_a_dict_comprehension_over_items_of_a_dict_holding_a_tensor_is_followed() -> None:
    model = model_class(PICKED, "Picked")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float32
    assert hp101_lines(PICKED) == [11]


def test_a_list_comprehension_over_values_of_a_dict_holding_a_tensor_is_followed() -> None:
    values = PICKED.replace(
        "return {k: v[idx] for k, v in fields.items()}", "return [v[idx] for v in fields.values()]"
    ).replace('kept["bias"]', "kept[0]")
    model = model_class(values, "Picked")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float32
    assert hp101_lines(values) == [11]


def test_a_dict_given_to_a_staticmethod_through_self_is_its_first_parameter() -> None:
    body = """\
        class Picked(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            @staticmethod
            def pick(fields, idx):
                return {k: v[idx] for k, v in fields.items()}

            def forward(self, x):
                fields = {"bias": torch.ones(x.shape[0], x.shape[1])}
                kept = self.pick(fields, torch.arange(x.shape[0]))
                return self.proj(x) + kept["bias"]
        """
    model = model_class(body, "Picked")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float32
    assert hp101_lines(body) == [11]
