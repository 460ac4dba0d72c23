"""The built-in models: building one leaves the caller's random numbers as they were (its
own weights come from a seeded generator of their own)."""

from __future__ import annotations

import pytest
import torch

from halfprec.io.zoo import BUILTINS

# minilm loads its real weights: nothing random
RANDOM_INIT = [
    "cnn",
    pytest.param("gpt2", marks=pytest.mark.slow),  # 124M parameters to initialise
    pytest.param("bert-base", marks=pytest.mark.slow),  # 110M parameters to initialise
]


@pytest.mark.parametrize("name", RANDOM_INIT)
def test_building_a_builtin_leaves_the_global_generator_where_it_was(name: str) -> None:
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    BUILTINS[name].build()
    assert torch.equal(torch.rand(4), expected)  # the caller's stream goes on where it was
