"""Ninth-round recall: tensors made into module state at call time, and placeholders an
``if`` may overwrite. Each model here is small and written for this test."""

from __future__ import annotations

from support.lint_models import Snippets

HEAD = "import torch\nfrom torch import nn\nfrom torch.nn import Parameter\n\n\n"
LINT = Snippets(HEAD)
_found = LINT.lines


def test_a_parameter_made_in_a_helper_of_forward_is_followed_to_its_reads() -> None:
    body = """\
        class Saliency(nn.Module):
            def forward(self, net, x):
                self._reset(x.shape[0])
                return net(x * torch.sigmoid(self.gate))

            def _reset(self, rows):
                self.gate = Parameter(0.5 * torch.randn(rows, 1))
        """
    assert _found(body) == [7]


def test_parameters_kept_per_key_in_a_dict_attribute_are_followed() -> None:
    body = """\
        class PerType(nn.Module):
            def forward(self, feats):
                self.w = {}
                for kind, h in feats.items():
                    self.w[kind] = nn.Parameter(data=torch.full((h.shape[-1],), 0.1))
                return {kind: h * self.w[kind].tanh() for kind, h in feats.items()}
        """
    assert _found(body) == [5]


def test_register_buffer_and_setattr_at_call_time_are_followed() -> None:
    body = """\
        class LazyScale(nn.Module):
            def forward(self, x):
                if not hasattr(self, "scale"):
                    self.register_buffer("scale", torch.ones(x.shape[-1]), persistent=False)
                return self.proj(x) * self.scale


        class LazyBias(nn.Module):
            def forward(self, x):
                self.register_parameter("shift", torch.nn.Parameter(torch.zeros(x.size(-1))))
                setattr(self, "tilt", nn.Buffer(torch.rand(x.size(-1))))
                return (self.proj(x) + self.shift) * self.tilt
        """
    assert _found(body) == [4, 10, 11]


def test_a_parameter_made_in_init_is_converted_with_the_model() -> None:
    body = """\
        class Plain(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.alpha = nn.Parameter(torch.ones(width))
                self.register_buffer("beta", torch.zeros(width))

            def forward(self, x):
                return x * self.alpha + self.beta
        """
    assert _found(body) == []


def test_a_placeholder_an_if_may_overwrite_still_reaches_the_join() -> None:
    body = """\
        class TwoTables(nn.Module):
            def forward(self, ids):
                left = torch.zeros(ids.shape[0], 0)
                if self.table_a is not None:
                    left = self.table_a(ids)
                    left = left * 2
                right = self.table_b(ids)
                return torch.cat([left, right], dim=1)
        """
    assert _found(body) == [3]


def test_a_placeholder_every_branch_overwrites_is_not_reported() -> None:
    body = """\
        class Either(nn.Module):
            def forward(self, ids):
                left = torch.empty(0)
                if self.table_a is not None:
                    left = self.table_a(ids)
                elif self.table_c is not None:
                    left = self.table_c(ids)
                else:
                    raise ValueError("no table")
                return torch.cat([left, self.table_b(ids)], dim=1)
        """
    assert _found(body) == []


def test_a_conditional_cast_of_the_name_itself_ends_the_walk() -> None:
    body = """\
        class Guarded(nn.Module):
            def forward(self, x):
                bias = torch.zeros(x.shape[-1])
                if bias.dtype != x.dtype:
                    bias = bias.to(x.dtype)
                return x + bias
        """
    assert _found(body) == []


def test_a_record_of_another_file_bound_to_a_name_then_returned_holds_the_tensor() -> None:
    body = """\
        from .outputs import Attribution


        class Attributor(nn.Module):
            def forward(self, x):
                h = self.encoder(x)
                out = Attribution(scores=h, noise=torch.rand(h.shape[0], 1))
                return out
        """
    assert _found(body) == [7]


def test_a_tensor_or_dict_of_tensors_input_and_a_dict_of_dicts_into_a_record() -> None:
    body = """\
        from typing import Dict, Union
        from torch import Tensor
        from .outputs import Attribution


        class PerType(nn.Module):
            def forward(self, net, feats: Union[Tensor, Dict[str, Tensor]]):
                if isinstance(feats, Tensor):
                    return Attribution(noise=torch.rand(feats.shape[0], 1, device=feats.device))
                held = {}
                for kind, h in feats.items():
                    held[kind] = {}
                    held[kind]["noise"] = torch.rand(h.shape[0], 1, device=h.device)
                return Attribution(held)
        """
    assert _found(body) == [9, 13]


def test_a_zero_dim_fp32_weight_through_a_function_of_numbers_meets_a_half_loss() -> None:
    body = """\
        import torch.nn.functional as F


        class Penalised(nn.Module):
            def forward(self, x):
                self.lagrange = torch.tensor(0.3, requires_grad=True)
                err = (self.net(x) - x).pow(2).mean()
                return F.softplus(self.lagrange) * 2.0 * err


        class Weighted(nn.Module):
            def forward(self, x):
                w = torch.tensor(0.3)
                return torch.exp(w) * self.net(x)
        """
    assert _found(body) == [6]


def test_a_helper_called_inside_dict_update_is_followed_into_the_dict() -> None:
    body = """\
        class Losses(nn.Module):
            def forward(self, x):
                h = self.head(x)
                total = {"main": h.mean()}
                total.update(self._aux(h))
                return total

            def _aux(self, h):
                acc = torch.zeros(2, device=h.device)
                for i, part in enumerate(self.parts(h)):
                    acc[i] += part["l1"]
                return {"aux": acc}
        """
    assert _found(body) == [9]


def test_a_graph_library_scatter_keeps_its_source_dtype() -> None:
    body = """\
        from torch_scatter import scatter


        class Degree(nn.Module):
            def forward(self, x, index):
                h = self.lin(x)
                ones = torch.ones(index.numel(), device=x.device)
                deg = scatter(ones, index, dim=0, dim_size=h.shape[0], reduce="sum")
                return self.out(torch.cat([h, deg[:, None]], dim=-1))


        class Counts(nn.Module):
            def forward(self, x, index):
                h = self.lin(x)
                acc = torch.zeros(h.shape[0], device=x.device)
                acc = acc.scatter_add(0, index, src=torch.ones(index.numel(), device=x.device))
                return acc.long()
        """
    assert _found(body) == [7]


def test_a_table_a_helper_hands_to_init_and_to_forward_cast_back_is_not_reported() -> None:
    body = """\
        class Grid(nn.Module):
            def __init__(self, size):
                super().__init__()
                self.register_buffer("table", self._table(size), persistent=False)
                self.extra = nn.Parameter(self._table(size))

            def _table(self, size):
                return torch.linspace(0, 1, size)[None, :].repeat(size, 1)

            def grow(self, size):
                self.table = self._table(size).to(dtype=self.table.dtype, device=self.table.device)

            def forward(self, x):
                if x.shape[-1] > self.table.shape[-1]:
                    self.grow(x.shape[-1])
                return x + self.table[: x.shape[-2], : x.shape[-1]] * self.extra[0, 0]
        """
    assert _found(body) == []


def test_an_attribute_that_is_a_dict_in_one_mode_and_a_parameter_in_another() -> None:
    body = """\
        class Masks(nn.Module):
            def forward(self, net, x):
                if isinstance(x, dict):
                    self.gate = {}
                    for kind, h in x.items():
                        self._one(kind, h.shape[0], h.device)
                    return {k: h * self.gate[k].sigmoid() for k, h in x.items()}
                self._all(x.shape[0], x.device)
                return net(x * self.gate.sigmoid())

            def _one(self, kind, rows, device):
                self.gate[kind] = Parameter(0.1 * torch.randn(rows, 1, device=device))

            def _all(self, rows, device):
                self.gate = Parameter(0.1 * torch.randn(rows, 1, device=device))
        """
    assert _found(body) == [12, 15]
