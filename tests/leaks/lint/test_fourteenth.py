"""Fourteenth-round rules: a method of an object of this file's classes (``self.model.encode(x)``
where ``self.model = Policy(...)``, ``Tree.build(...)``) is on the forward path, a tensor
handed to it is followed into it, and its result back into every such caller; a tuple that
a helper returns, bound to one name, holds the tensor at its position only; a value written
into a table made fp32 by an explicit dtype takes that dtype; ``hx=`` of a layer held in a
``ModuleList`` is a recurrent state. Each model here is small and written for this test."""

from __future__ import annotations

import torch
from torch import nn

from leaks.lint import test_thirteenth as thirteenth
from support.lint_models import HEAD, Snippets

LINT = Snippets(HEAD)
_found = LINT.lines


TWO_CALLERS = """\
    class Denoiser(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def sigmas(self, n, device):
            return torch.randn(n, device=device).exp()

        def forward(self, x):
            s = self.sigmas(x.shape[0], x.device).to(x.dtype)
            return self.lin(x) * s[:, None]


    class Candidates(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.net = Denoiser(d)

        def forward(self, x):
            s = self.net.sigmas(x.shape[0], x.device)
            return self.net(x) * s[:, None]
    """


def test_a_method_result_passed_uncast_by_a_holder_of_its_class_is_reported() -> None:
    assert _found(TWO_CALLERS) == [7]


def test_the_same_method_result_cast_by_every_caller_stays_silent() -> None:
    uncast = "s = self.net.sigmas(x.shape[0], x.device)"
    body = TWO_CALLERS.replace(uncast, uncast + ".to(x.dtype)")
    assert _found(body) == []


SCORER = """\
    class Scorer:
        def per_chain(self, logits, chains):
            out = torch.zeros(logits.shape[0], len(chains), device=logits.device)
            for i, c in enumerate(chains):
                out[:, i] = logits[:, c].mean(-1)
            return out


    class Head(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)
            self.scorer = Scorer()

        def forward(self, x, chains):
            logits = self.lin(x)
            return logits[:, :2] * self.scorer.per_chain(logits, chains)
    """


def test_a_buffer_filled_in_a_held_objects_method_and_returned_is_reported() -> None:
    assert _found(SCORER) == [3]


def test_the_filled_buffer_cast_where_it_is_returned_stays_silent() -> None:
    assert _found(SCORER.replace("return out", "return out.to(logits.dtype)")) == []


SPREAD = """\
    class Tree:
        def __init__(self, d):
            self.d = d

        def spread(self, h, w):
            return h * w[:, None]


    class Kernel(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)
            self.tree = Tree(d)

        def forward(self, x, w=None):
            if w is None:
                w = torch.ones(x.shape[0], device=x.device)
            return self.tree.spread(self.lin(x), w)
    """


def test_a_default_handed_to_a_held_objects_method_is_followed_into_it() -> None:
    assert _found(SPREAD) == [17]


def test_a_default_cast_in_the_held_objects_method_stays_silent() -> None:
    assert _found(SPREAD.replace("w[:, None]", "w[:, None].to(h.dtype)")) == []


BUILD = """\
    class Tree:
        def __init__(self, h, w):
            self.h = h
            self.w = w

        @staticmethod
        def weigh(h, w):
            return h * w[:, None]

        @classmethod
        def build(cls, h, w):
            return cls(Tree.weigh(h, w), w)


    class Kernel(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x):
            w = torch.ones(x.shape[0], device=x.device)
            return Tree.build(self.lin(x), w).h
    """


def test_a_tensor_handed_to_a_class_and_static_method_is_followed() -> None:
    assert _found(BUILD) == [21]


def test_the_class_and_static_method_casting_it_stay_silent() -> None:
    assert _found(BUILD.replace("w[:, None]", "w[:, None].to(h.dtype)")) == []


TUPLE = """\
    class Enc(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def inputs(self, x):
            mask = torch.ones(x.shape[:2], device=x.device)
            return self.lin(x), mask

        def forward(self, x):
            held = self.inputs(x)
            h, mask = held
            return h.masked_fill(mask[..., None] == 0, 0.0)
    """


def test_a_tuple_element_bound_to_one_name_is_followed_at_its_position_only() -> None:
    assert _found(TUPLE) == []


def test_the_tuple_element_that_meets_half_is_still_reported() -> None:
    assert _found(
        TUPLE.replace("h.masked_fill(mask[..., None] == 0, 0.0)", "h * held[1][..., None]")
    ) == [7]


def test_unpacking_a_held_tuple_follows_the_element_at_its_position() -> None:
    assert _found(TUPLE.replace("mask[..., None] == 0, 0.0)", "0.0) * mask[..., None]")) == [7]


TABLE = """\
    class Doa(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(3, d)

        def forward(self, x):
            pts = torch.zeros(4, 3, dtype=torch.float32, device=x.device)
            pts[1:, 0] = torch.arange(3, device=x.device) / 3.0
            return self.lin(pts) + x
    """


def test_a_value_written_into_an_explicit_fp32_table_takes_its_dtype() -> None:
    assert _found(TABLE) == []


def test_the_same_value_written_into_a_default_dtype_table_is_reported() -> None:
    assert _found(TABLE.replace("dtype=torch.float32, ", "")) == [7, 8]


RECURRENT = """\
    class Decoder(nn.Module):
        def __init__(self, d, kind):
            super().__init__()
            rnn = nn.LSTM if kind == "lstm" else nn.GRU
            self.rnn = nn.ModuleList([rnn(d, d, 1, batch_first=True)])

        def init_state(self, b):
            return torch.zeros(1, b, self.rnn[0].hidden_size), None

        def forward(self, x):
            state = self.init_state(x.shape[0])
            h, _ = state
            out, h = self.rnn[0](x, hx=h)
            return out
    """


def test_hx_of_a_layer_held_in_a_module_list_is_a_recurrent_state() -> None:
    assert _found(RECURRENT) == [8]


def test_a_half_model_with_those_leaks_does_meet_fp32() -> None:
    """The torch behaviour the rules rest on: a float tensor index-free written into a
    slice takes the destination's dtype, and an fp32 state into a half GRU raises."""
    table = torch.zeros(4, 3, dtype=torch.float32)
    table[1:, 0] = torch.arange(3, dtype=torch.bfloat16) / 3.0
    assert table.dtype == torch.float32
    gru = nn.GRU(2, 2, 1, batch_first=True).to(torch.bfloat16)
    try:
        gru(torch.zeros(1, 3, 2, dtype=torch.bfloat16), torch.zeros(1, 1, 2))
    except RuntimeError as exc:
        assert "dtype" in str(exc) or "type" in str(exc)
    else:
        raise AssertionError("an fp32 state into a bf16 GRU ran")


SCATTER = """\
    class Areas(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x, leaves: torch.Tensor, areas=None):
            h = self.lin(x)
            if areas is None:
                areas = torch.ones(leaves.shape[0], device=x.device)
            total = h.new_zeros(h.shape[0])
            total[leaves] = areas
            return h * total[:, None]
    """


def test_an_fp32_value_written_at_tensor_indices_into_a_half_tensor_is_reported() -> None:
    assert _found(SCATTER) == [9]


def test_the_same_value_written_at_a_mask_or_by_index_copy_is_reported() -> None:
    masked = SCATTER.replace("total[leaves] = areas", "total[leaves > 0] = areas")
    copied = SCATTER.replace("total[leaves] = areas", "total.index_copy_(0, leaves, areas)")
    assert _found(masked) == [9]
    assert _found(copied) == [9]


def test_the_same_value_written_into_a_slice_or_at_an_int_stays_silent() -> None:
    sliced = SCATTER.replace("total[leaves] = areas", "total[: areas.shape[0]] = areas")
    unknown = SCATTER.replace("leaves: torch.Tensor", "leaves")
    assert _found(sliced) == []
    assert _found(unknown) == []  # an index the lint cannot see made may be an int


def test_index_put_of_fp32_into_half_raises() -> None:
    """The torch behaviour the rule rests on: a slice write casts, an index write raises."""
    total = torch.zeros(4, dtype=torch.bfloat16)
    total[:2] = torch.ones(2)
    for write in (
        lambda: total.__setitem__(torch.tensor([0, 2]), torch.ones(2)),
        lambda: total.index_copy_(0, torch.tensor([0, 2]), torch.ones(2)),
    ):
        try:
            write()
        except RuntimeError as exc:
            assert "dtype" in str(exc) or "type" in str(exc)
        else:
            raise AssertionError("an fp32 index write into bf16 ran")


BORROWED = """\
    class Field(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x, strengths=None):
            h = self.lin(x)
            if strengths is None:
                strengths = torch.ones(x.shape[0], device=x.device)
            out_dtype = torch.promote_types(h.dtype, strengths.dtype)
            out = torch.zeros(h.shape, dtype=out_dtype, device=x.device)
            out[:, 0] = h[:, 0]
            return out
    """


def test_a_buffer_made_in_the_dtype_of_an_fp32_default_is_followed_to_the_output() -> None:
    assert _found(BORROWED) == [9]


def test_a_half_value_cast_to_the_dtype_of_an_fp32_default_is_followed() -> None:
    cast = BORROWED.replace(
        "out = torch.zeros(h.shape, dtype=out_dtype, device=x.device)", "out = h.to(out_dtype)"
    )
    assert _found(cast) == [9]


def test_the_buffer_cast_back_before_it_leaves_stays_silent() -> None:
    assert _found(BORROWED.replace("return out", "return out.to(h.dtype)")) == []


# thirteenth round's guard without its explicit upcast: half distances written at a mask
# into the fp32 buffer (torch raises)
FARTHEST = thirteenth.FARTHEST.replace(".sum(-1).float()", ".sum(-1)")


def test_half_values_written_at_a_mask_into_an_fp32_buffer_are_reported() -> None:
    assert _found(FARTHEST) == [4]
    xyz = torch.rand(1, 5, 3, dtype=torch.bfloat16)
    distance = torch.ones(1, 5) * 1e10
    dist = (xyz**2).sum(-1)
    try:
        distance[dist < distance] = dist[dist < distance]
    except RuntimeError as exc:
        assert "dtype" in str(exc)
    else:
        raise AssertionError("a bf16 index put into fp32 ran")


CELLS = """\
    CELL = {"lstm": nn.LSTMCell, "gru": nn.GRUCell}


    class Stack(nn.Module):
        def __init__(self, d, kind):
            super().__init__()
            self.cells = nn.ModuleList([CELL[kind](d, d), CELL[kind](d, d)])

        def forward(self, x):
            states = [torch.zeros(x.shape[0], 8, device=x.device) for _ in self.cells]
            for i, cell in enumerate(self.cells):
                x = cell(x, states[i])
            return x
    """


def test_states_kept_in_a_list_into_cells_of_a_dict_of_classes_are_reported() -> None:
    assert _found(CELLS) == [10]


def test_a_dict_of_other_classes_gives_no_recurrent_state() -> None:
    body = CELLS.replace('{"lstm": nn.LSTMCell, "gru": nn.GRUCell}', '{"a": Gate, "b": Gate}')
    body = "class Gate(nn.Module):\n    def forward(self, x, s):\n        return x\n\n\n" + body
    assert _found(body) == []


GATHERED = """\
    class Masked(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x, restore):
            mask = torch.ones(x.shape[:2], device=x.device)
            mask[:, : x.shape[1] // 2] = 0
            mask = torch.gather(mask, dim=1, index=restore)
            return (self.lin(x).sum(-1) * mask).sum() / mask.sum()
    """


def test_a_mask_gathered_by_indices_is_followed_as_its_values() -> None:
    assert _found(GATHERED) == [7]
    assert _found(
        GATHERED.replace("torch.gather(mask, dim=1, index=restore)", "mask.gather(1, restore)")
    ) == [7]


def test_a_gathered_mask_cast_stays_silent() -> None:
    assert _found(GATHERED.replace("index=restore)", "index=restore).to(x.dtype)")) == []


CONSTANT = """\
    class Prior(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, z):
            log_2pi = torch.log(torch.tensor([2 * torch.pi], device=z.device))
            return (-0.5 * (log_2pi + self.lin(z) ** 2)).sum(-1)
    """


def test_a_one_element_tensor_of_torch_pi_is_floating_data() -> None:
    assert _found(CONSTANT) == [7]
    assert _found(CONSTANT.replace("2 * torch.pi", "2 * math.tau")) == [7]


def test_a_one_element_tensor_of_an_integer_stays_silent_until_a_float_function() -> None:
    integer = CONSTANT.replace("2 * torch.pi", "2 * 3")
    assert _found(integer) == [7]  # torch.log of int64 data is fp32 (round eighteen)
    cast = integer.replace("device=z.device))", "device=z.device)).to(z.dtype)")
    assert cast != integer and _found(cast) == []
