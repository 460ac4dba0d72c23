"""The class facts: a submodule container bound with an annotation
(``self.cells: List[Cell] = nn.ModuleList()``) holds its layers as an unannotated one does,
so an fp32 state made by a helper and sliced into each layer's call is followed into the
layers. Each model here is small and written for this test; the torch check shows what the
model does in half."""

from __future__ import annotations

import pytest
import torch

from support.lint_models import Snippets

HEAD = "from typing import List, Optional\n\nimport torch\nfrom torch import nn\n\n\n"
LINT = Snippets(HEAD)
_found = LINT.lines


STATE = """\
    class Cell(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.d = d
            self.rnn = nn.GRU(d, d, batch_first=True)

        def forward(self, x, h0: Optional[torch.Tensor] = None):
            if h0 is None:
                h0 = x.new_zeros(1, x.shape[0], self.d)
            return self.rnn(x, h0)


    class Tower(nn.Module):
        def __init__(self, d, n):
            super().__init__()
            self.d = d
            self.cells: List[Cell] = nn.ModuleList()
            for _ in range(n):
                self.cells.append(Cell(d))

        def initial(self, b, device):
            return torch.zeros((len(self.cells), b, self.d), device=device)

        def forward(self, x, state: Optional[torch.Tensor] = None):
            if state is None:
                state = self.initial(x.shape[0], x.device)
            kept = []
            for i, cell in enumerate(self.cells):
                x, s = cell(x, state[i : i + 1])
                kept.append(s)
            return x, torch.cat(kept)
    """


@pytest.mark.parametrize(
    "binding",
    ["self.cells: List[Cell] = nn.ModuleList()", "self.cells: nn.ModuleList = nn.ModuleList()"],
)
def test_a_helper_state_sliced_into_annotated_layers_is_reported(binding: str) -> None:
    source = STATE.replace("self.cells: List[Cell] = nn.ModuleList()", binding)
    model = LINT.model(source, "Tower")(4, 2).half()
    with pytest.raises(RuntimeError, match="dtype"):
        model(torch.randn(2, 3, 4).half())  # the GRU meets the fp32 state
    assert _found(source) == [22]


def test_the_same_state_made_in_the_input_dtype_stays_silent() -> None:
    cast = STATE.replace("device=device)", "device=device).half()")
    assert _found(cast) == []
