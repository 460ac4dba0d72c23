from __future__ import annotations

import dataclasses
from collections import OrderedDict, defaultdict
from typing import NamedTuple

import torch
from hypothesis import given
from hypothesis import strategies as st

from halfprec.tree import flatten, map_tensors


class Pair(NamedTuple):
    a: torch.Tensor
    b: int


@dataclasses.dataclass(frozen=True)
class Out:
    logits: torch.Tensor
    extra: list[torch.Tensor]
    note: str = "keep"


def double(t: torch.Tensor) -> torch.Tensor:
    return t * 2


def test_map_keeps_container_types_and_non_tensors() -> None:
    obj = {
        "od": OrderedDict(x=torch.ones(1)),
        "pair": Pair(torch.ones(2), 7),
        "out": Out(torch.ones(1), [torch.ones(1)]),
        "list": [torch.ones(1), "text", None],
        "dd": defaultdict(list, {"k": torch.ones(1)}),
    }
    new = map_tensors(double, obj)
    assert type(new["od"]) is OrderedDict and new["od"]["x"].item() == 2
    assert type(new["pair"]) is Pair and new["pair"].b == 7 and new["pair"].a.sum() == 4
    assert type(new["out"]) is Out and new["out"].note == "keep"
    assert new["out"].extra[0].item() == 2 and new["out"].logits.item() == 2
    assert new["list"][1:] == ["text", None]
    assert type(new["dd"]) is defaultdict and new["dd"]["k"].item() == 2
    assert obj["out"].logits.item() == 1  # the original is untouched


def test_flatten_paths() -> None:
    obj = {"a": [torch.zeros(1), {"b": torch.zeros(2)}], "p": Pair(torch.zeros(3), 1)}
    assert list(flatten(obj)) == ["a.0", "a.1.b", "p.a"]
    assert list(flatten(torch.zeros(1))) == ["output"]


def test_hf_model_output_roundtrip() -> None:
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    out = BaseModelOutputWithPooling(last_hidden_state=torch.ones(1, 2), pooler_output=None)
    new = map_tensors(double, out)
    assert isinstance(new, BaseModelOutputWithPooling)
    assert new.last_hidden_state.sum() == 4 and new[0].sum() == 4
    assert new.pooler_output is None
    assert list(flatten(new)) == ["last_hidden_state"]


nested = st.recursive(
    st.integers(1, 3).map(lambda n: torch.arange(n, dtype=torch.float32)),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text("abc", min_size=1, max_size=2), children, max_size=3)
        | st.tuples(children, children)
    ),
    max_leaves=8,
)


@given(nested)
def test_map_identity_preserves_paths_and_values(obj: object) -> None:
    before = flatten(obj)
    after = flatten(map_tensors(lambda t: t.clone(), obj))
    assert list(before) == list(after)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_flatten_paths_are_unique_for_dotted_and_non_string_keys() -> None:
    x, y, z, w = (torch.full((1,), float(i)) for i in range(4))
    flat = flatten({"a.b": x, "a": {"b": y}, 0: z, "0": w})
    assert flat == {"['a.b']": x, "a.b": y, "[0]": z, "0": w}
    assert list(flatten({"k": {1: x, "": y}})) == ["k[1]", "k['']"]


def test_flatten_keeps_every_tensor() -> None:
    obj = {"a.b": torch.zeros(1), "a": {"b": torch.ones(1)}, 0: torch.ones(2), "0": torch.ones(3)}
    assert len(flatten(obj)) == 4
