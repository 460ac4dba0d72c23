"""convert/swap.py: a behaviour is a class swap that keeps the module's name, signature,
state and pickling, shows its label, and comes off again with unswap."""

from __future__ import annotations

import inspect
import pickle
import sys
from typing import Any

import torch
from torch import nn

from halfprec.convert.boundaries import Guard, GuardSettings
from halfprec.convert.swap import Behaviour, base_class, behaviours, swap, unswap


class Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((2,), 3.0))

    def forward(self, x: torch.Tensor, *, shift: float = 0.0) -> torch.Tensor:
        return x * self.w + shift


def _fresh() -> type[Affine]:
    """A new subclass of Affine: swap makes (and caches) its swapped class anew."""

    class Fresh(Affine):
        pass

    return Fresh


class Scaled(Behaviour):
    attr = "_test_scaled"

    @classmethod
    def label(cls, settings: Any) -> str:
        return f"x{settings}"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return super().forward(*args, **kwargs) * getattr(self, Scaled.attr)  # type: ignore[misc]


class Tagged(Behaviour):
    attr = "_test_tagged"

    @classmethod
    def label(cls, settings: Any) -> str:
        return str(settings)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return super().forward(*args, **kwargs)  # type: ignore[misc]


class Quiet(Behaviour):
    attr = "_test_quiet"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return super().forward(*args, **kwargs) + getattr(self, Quiet.attr)  # type: ignore[misc]


def test_a_swapped_module_runs_its_behaviours_outermost_first_with_keywords() -> None:
    fresh = _fresh()
    module = fresh()
    swap(module, {Scaled: 10, Quiet: 1})
    x = torch.ones(2)
    # Scaled wraps Quiet wraps Affine: ((x * 3 + shift) + 1) * 10
    assert module(x, shift=2.0).tolist() == [60.0, 60.0]
    assert isinstance(module, Affine) and base_class(module) is fresh
    assert behaviours(module) == (Scaled, Quiet)
    assert list(module.state_dict()) == ["w"]


def test_a_swapped_forward_runs_the_behaviours_with_no_wrapper_between() -> None:
    """Every converted module runs its class's forward on each call: that forward is the
    outermost behaviour's own, so a call costs no Python frame beyond the behaviours'
    and the original's."""
    module = _fresh()()
    swap(module, {Scaled: 10, Quiet: 1})
    frames: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "forward":
            frames.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        module.forward(torch.ones(2))
    finally:
        sys.setprofile(None)
    assert frames == ["Scaled.forward", "Quiet.forward", "Affine.forward"]


def test_a_swapped_class_shows_its_labels_and_keeps_the_original_s_names() -> None:
    fresh = _fresh()
    module = fresh()
    swap(module, {Quiet: 0})
    assert module._get_name() == "Fresh" and repr(module) == "Fresh()"  # no label: nothing
    swap(module, {Scaled: 2})
    assert repr(module) == "Fresh[x2]()"
    swap(module, {Tagged: "tag"})
    assert repr(module) == "Fresh[x2, tag]()"  # labels in order, empty ones left out
    cls = type(module)
    assert (cls.__name__, cls.__qualname__, cls.__module__) == (
        "Fresh",
        fresh.__qualname__,
        fresh.__module__,
    )
    assert behaviours(module) == (Quiet, Scaled, Tagged)  # added on top of those it had
    # generate() and Trainer read forward's signature
    assert inspect.signature(module.forward) == inspect.signature(fresh().forward)


def test_a_swapped_module_pickles_by_its_original_class_and_its_behaviours() -> None:
    module = nn.Linear(2, 2)
    swap(module, {Guard: GuardSettings(torch.float16)})
    data = pickle.dumps(module)
    assert b"_swapped" not in data and b"_make" not in data
    back = pickle.loads(data)
    assert behaviours(back) == (Guard,) and base_class(back) is nn.Linear
    assert back.__dict__[Guard.attr] == GuardSettings(torch.float16)
    assert type(back) is type(module)  # one class per (base, behaviours), made once


def test_unswap_gives_the_class_back_and_drops_the_settings() -> None:
    module = Affine()
    swap(module, {Scaled: 10, Quiet: 1})
    unswap(module)
    assert type(module) is Affine and behaviours(module) == ()
    assert Scaled.attr not in module.__dict__ and Quiet.attr not in module.__dict__
    assert module(torch.ones(2)).tolist() == [3.0, 3.0]
    unswap(module)  # a module with no behaviours stays as it is
    assert type(module) is Affine
