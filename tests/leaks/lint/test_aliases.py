"""A loop variable is an alias of the element it is bound to: a tensor stored into it
(``r["scores"] = t``, ``bucket.append(t)``) is held by the container looped over, which the
walk follows after the loop (see :mod:`halfprec.leaks.lint.aliases`). Each model here is
small and written for this test; the torch checks show what the model does in half."""

from __future__ import annotations

import torch

from support.lint_models import hp101_lines, model_class

SCORED = """\
    class Scored(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.det = nn.Linear(d, d)

        def forward(self, x):
            found = [{"scores": s} for s in self.det(x)]
            for r in found:
                r["scores"] = torch.cat([r["scores"], torch.ones(2) * 0.5])
            return found
    """


def test_a_piece_joined_into_a_dict_of_a_returned_list_in_a_loop_is_reported() -> None:
    model = model_class(SCORED, "Scored")(4).half()
    assert model(torch.randn(2, 4).half())[0]["scores"].dtype == torch.float32
    assert hp101_lines(SCORED) == [9]


def test_a_field_set_on_each_zipped_element_of_a_returned_list_is_reported() -> None:
    body = """\
        class Extra(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.det = nn.Linear(d, d)

            def forward(self, x, sizes):
                outs = [{"scores": s} for s in self.det(x)]
                for out, n in zip(outs, sizes):
                    out["pad"] = torch.zeros(n)
                return outs
        """
    model = model_class(body, "Extra")(4).half()
    assert model(torch.randn(2, 4).half(), [1, 2])[1]["pad"].dtype == torch.float32
    assert hp101_lines(body) == [9]


def test_a_tensor_appended_to_each_enumerated_list_of_a_returned_list_is_reported() -> None:
    body = """\
        class Buckets(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.det = nn.Linear(d, d)

            def forward(self, x):
                buckets = [[h] for h in self.det(x)]
                for i, bucket in enumerate(buckets):
                    bucket.append(torch.full((x.shape[-1],), float(i)))
                return [torch.stack(b) for b in buckets]
        """
    model = model_class(body, "Buckets")(4).half()
    assert model(torch.randn(2, 4).half())[0].dtype == torch.float32
    assert hp101_lines(body) == [9]


def test_a_piece_cast_before_it_joins_the_loop_element_stays_silent() -> None:
    cast = SCORED.replace("torch.ones(2) * 0.5", "(torch.ones(2) * 0.5).to(x.dtype)")
    assert hp101_lines(cast) == []
