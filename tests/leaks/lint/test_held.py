"""Tenth-round recall: Python floats held on ``self`` made into a tensor in forward, and
an fp32 tensor that a half result is added into in place. Each model here is small and
written for this test."""

from __future__ import annotations

from support.lint_models import Snippets

HEAD = "from typing import List, Optional, Sequence\n\nimport torch\nfrom torch import nn\n\n\n"
LINT = Snippets(HEAD)
_found = LINT.lines


def test_a_list_of_floats_held_on_self_made_a_tensor_meets_the_half_input() -> None:
    body = """\
        class ChannelScale(nn.Module):
            def __init__(self, gains: Optional[Sequence[float]] = None) -> None:
                super().__init__()
                self.gains = gains

            def forward(self, img):
                if self.gains is None:
                    return img
                return img * torch.tensor(self.gains, device=img.device).view(1, -1, 1, 1)
        """
    assert _found(body) == [9]


def test_a_literal_list_of_floats_held_on_self_is_a_float_list() -> None:
    body = """\
        class Blend(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.mix = [0.3, 0.7]

            def forward(self, a, b):
                return torch.stack([a, b], -1) @ torch.tensor(self.mix).to(a.device)
        """
    assert _found(body) == [7]


def test_a_list_of_ints_or_an_unannotated_attribute_stays_silent() -> None:
    body = """\
        class Pick(nn.Module):
            def __init__(self, rows: List[int], scale) -> None:
                super().__init__()
                self.rows = rows
                self.scale = scale

            def forward(self, x):
                picked = x.index_select(0, torch.tensor(self.rows, device=x.device))
                return picked * torch.tensor(self.scale, device=x.device)
        """
    assert _found(body) == []


def test_a_half_result_added_in_place_into_an_fp32_tensor_that_is_returned() -> None:
    body = """\
        class Residual(nn.Module):
            def __init__(self, body: nn.Module) -> None:
                super().__init__()
                self.body = body

            def forward(self, x):
                acc = torch.zeros(x.shape[0], 8, device=x.device)
                return acc.mul_(0.5).add_(self.body(x))
        """
    assert _found(body) == [7]


def test_an_in_place_add_as_a_statement_leaves_the_later_uses_to_decide() -> None:
    body = """\
        class Count(nn.Module):
            def forward(self, x):
                seen = torch.zeros(x.shape[0], device=x.device)
                seen.add_(x.sum(-1))
                return x, seen.tolist()
        """
    assert _found(body) == []


def test_a_block_bound_to_a_name_then_appended_to_a_module_list_is_followed() -> None:
    body = """\
        class Gate(nn.Module):
            def __init__(self, d: int) -> None:
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, h, weight):
                return self.proj(h) * weight


        class Stack(nn.Module):
            def __init__(self, d: int, depth: int) -> None:
                super().__init__()
                self.gates = nn.ModuleList()
                for _ in range(depth):
                    gate = Gate(d)
                    self.gates.append(gate)

            def forward(self, h):
                weight = torch.full(h.shape, 0.5, device=h.device)
                for i in range(len(self.gates)):
                    h = self.gates[i](h, weight)
                return h
        """
    assert _found(body) == [19]


def test_a_cell_state_handed_only_to_an_lstm_cell_inside_its_state_tuple() -> None:
    body = """\
        class Decoder(nn.Module):
            def __init__(self, d: int) -> None:
                super().__init__()
                self.cell = nn.LSTMCell(d, d)
                self.out = nn.Linear(d, 1)

            def forward(self, frames):
                h = frames.new_zeros(frames.shape[1], frames.shape[2])
                c = torch.zeros(frames.shape[1], frames.shape[2], device=frames.device)
                outs = []
                for x in frames:
                    h, c = self.cell(x, (h, c))
                    outs.append(self.out(h))
                return torch.stack(outs)
        """
    assert _found(body) == [9]


def test_a_state_handed_to_a_gru_cell_as_hx_is_its_hidden_state() -> None:
    body = """\
        class Tracker(nn.Module):
            def __init__(self, d: int) -> None:
                super().__init__()
                self.cell = nn.GRUCell(d, d)

            def forward(self, x):
                state = torch.zeros(x.shape[0], x.shape[1], device=x.device)
                return self.cell(x, hx=state)
        """
    assert _found(body) == [7]


def test_a_0_dim_accumulator_of_losses_on_pairs_unpacked_from_a_list() -> None:
    body = """\
        class PairLoss(nn.Module):
            def forward(self, pairs):
                total = torch.tensor(0.0, device=pairs[0][0].device)
                for gold, pred in pairs:
                    total += nn.functional.smooth_l1_loss(pred, gold)
                return total
        """
    assert _found(body) == [3]


def test_a_0_dim_zero_returned_alone_reaches_the_output() -> None:
    body = """\
        class MaybeEmpty(nn.Module):
            def forward(self, pairs):
                if not pairs:
                    return torch.tensor(0.0)
                return sum(nn.functional.l1_loss(p, g) for g, p in pairs)
        """
    assert _found(body) == [4]  # a 0-dim fp32 output (see test_zero_output.py)
