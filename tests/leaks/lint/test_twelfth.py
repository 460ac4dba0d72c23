"""Twelfth-round rules: a 0-dim loss met with a value whose rank is known only through a
helper's returned tuple; a value handed to a torch loss layer held on ``self``;
``torch.tensor(name)`` of a name bound to a float literal; and a fix never anchored on a
parameter the docstring calls integer, nor on a tuple. Each model here is small and
written for this test."""

from __future__ import annotations

import torch
from torch import nn

from halfprec.leaks.lint import LintConfig, fix_source
from support.lint_models import HEAD, Snippets

LINT = Snippets(HEAD)
_findings, _found = LINT.messages, LINT.lines


HELPER_TUPLES = """\
    class PairLoss(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
            self.w_box = 2.5

        def _box_terms(self, pred, labels):
            pos = labels != self.n
            if pos.any():
                box = (pred[pos] ** 2).sum()
            else:
                box = torch.zeros([], device=pred.device)
            return box, pred.sigmoid().sum()

        def _terms(self, pred, labels):
            total = 0
            box, norm = self._box_terms(pred, labels)
            total = total + norm
            return box, total

        def forward(self, pred, labels):
            box, norm = self._terms(pred, labels)
            norm = torch.clip(norm, min=1.0)
            return self.w_box * box / norm
    """


def test_the_promotion_behind_the_helper_tuple_rule() -> None:
    half = torch.ones(3, dtype=torch.float16)
    box = torch.zeros([])
    norm = torch.clip(half.sigmoid().sum(), min=1.0)
    assert (2.5 * box / norm).dtype == torch.float32


def test_a_0dim_zero_met_with_a_0dim_element_of_a_helper_tuple_reaches_the_output() -> None:
    found = _findings(HELPER_TUPLES)
    assert [line for line, _ in found] == [12]
    assert "0-dim fp32 value that reaches the module's output" in found[0][1]


def test_a_0dim_zero_met_with_an_element_that_has_dimensions_stays_silent() -> None:
    body = HELPER_TUPLES.replace("pred.sigmoid().sum()", "pred.sigmoid().sum(dim=-1)")
    assert _found(body) == []


LOSS_LAYERS = """\
    class RankLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.ce = nn.CrossEntropyLoss()

        def forward(self, scores, labels):
            matrix = torch.full((scores.shape[0], 4), -1e4, device=scores.device)
            matrix[:, 0] = scores
            return self.ce(matrix, labels)


    class AuxLoss(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
            self.bce = nn.BCEWithLogitsLoss()

        def forward(self, logits, labels):
            target = torch.zeros(labels.size(0), self.n)
            target[labels > 0] = 1.0
            return self.bce(logits, target) * 0.5 + logits.mean()
    """


def test_the_promotion_behind_the_loss_layer_rule() -> None:
    half = torch.rand(2, 3).half()
    target = torch.zeros(2, 3)
    loss = nn.BCEWithLogitsLoss()(half, target) * 0.5 + half.mean()
    assert loss.dim() == 0 and loss.dtype == torch.float32
    ones = torch.ones(2)
    assert nn.CosineEmbeddingLoss()(half, half, ones).dtype == torch.float16


def test_a_tensor_handed_to_a_torch_loss_layer_on_self_reaches_the_output() -> None:
    assert _found(LOSS_LAYERS) == [7, 19]


def test_a_loss_layer_of_a_half_input_and_integer_labels_stays_silent() -> None:
    body = """\
        class Plain(nn.Module):
            def __init__(self):
                super().__init__()
                self.ce = nn.CrossEntropyLoss()
                self.cos = nn.CosineEmbeddingLoss()

            def forward(self, logits, labels, a, b):
                mask = torch.ones(labels.shape[0], dtype=torch.bool, device=labels.device)
                same = torch.ones(a.shape[0], device=a.device)
                return self.ce(logits[mask], labels[mask]) + self.cos(a, b, same)
        """
    assert _found(body) == []


FLOAT_NAMES = """\
    class Logged(nn.Module):
        def __init__(self, use_l1: bool):
            super().__init__()
            self.use_l1 = use_l1

        def forward(self, pred, target):
            main = (pred - target).pow(2).mean()
            if self.use_l1:
                l1 = (pred - target).abs().mean()
            else:
                l1 = 0.0
            loss = main + l1
            return loss, torch.cat([main.unsqueeze(0), torch.tensor(l1).unsqueeze(0)])
    """


def test_torch_tensor_of_a_name_bound_to_a_float_literal_is_fp32() -> None:
    assert torch.tensor(0.0).dtype == torch.float32
    assert _found(FLOAT_NAMES) == [13]


def test_torch_tensor_of_a_name_bound_to_an_integer_stays_silent() -> None:
    body = FLOAT_NAMES.replace("l1 = 0.0", "l1 = 0").replace(
        "(pred - target).abs().mean()", "int((pred - target).abs().sum())"
    )
    assert _found(body) == []


def test_a_fix_never_anchors_on_a_parameter_documented_as_integer() -> None:
    body = '''\
        class Assigner(nn.Module):
            def forward(self, scores: Tensor, boxes: Tensor, labels: Tensor, crowd: Tensor):
                """
                :param scores: Tensor (float32): class scores, shape (B, L, C)
                :param boxes: Tensor (float32): boxes, shape (B, L, 4)
                :param labels: Tensor (int64): class ids, shape (B, L)
                :param crowd: Tensor (int): whether a box is a crowd, shape (B, L)
                """
                b, n, _ = boxes.shape
                if n == 0:
                    assigned = torch.zeros([b, n, 4], device=labels.device)
                    return assigned, scores
                return boxes * scores.amax(-1, keepdim=True) + crowd.unsqueeze(-1)
        '''
    source = "from torch import Tensor\n" + LINT.source(body)
    fixed = fix_source(source, LintConfig(unsafe_fixes=True))
    assert "crowd.new_zeros" not in fixed
    assert "boxes.new_zeros" in fixed


def test_a_fix_never_anchors_on_a_name_unpacked_as_a_tuple() -> None:
    body = """\
        class Heads(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n

            def forward(self, logits, labels):
                first, second = logits
                target = torch.zeros(labels.size(0), self.n)
                return (first * target).sum() + second.mean()
        """
    fixed = fix_source(LINT.source(body), LintConfig(unsafe_fixes=True))
    assert "logits.new_zeros" not in fixed


ANCHORS = """\
    def make_points(feats, strides, offset: float = 0.5, dtype: torch.dtype = torch.float):
        points = []
        for feat, stride in zip(feats, strides):
            h, w = feat.shape[-2:]
            xs = (torch.arange(end=w) + offset) * stride
            ys = (torch.arange(end=h) + offset) * stride
            gy, gx = torch.meshgrid(ys, xs, indexing="ij")
            points.append(torch.stack([gx, gy], dim=-1).to(dtype=dtype).reshape(-1, 2))
        return torch.cat(points)


    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.reg = nn.Conv2d(8, 2, 1)
            self.strides = (8, 16)

        def forward(self, feats):
            points = make_points(feats, self.strides)
            offsets = torch.cat([self.reg(f).flatten(2).transpose(1, 2) for f in feats], dim=1)
            return offsets + points
    """


def test_the_promotion_behind_the_dtype_default_rule() -> None:
    xs = (torch.arange(end=4) + 0.5) * 8
    assert xs.to(dtype=torch.float).dtype == torch.float32
    assert (torch.ones(2, dtype=torch.float16) + xs[:2]).dtype == torch.float32


def test_a_cast_to_a_dtype_parameter_defaulting_to_fp32_is_fp32_asked_for() -> None:
    """The lead's fourth ruling (b): a helper's explicit float32 return (a ``dtype``
    parameter defaulting to ``torch.float32`` that no call passes) is fp32 asked for."""
    assert _found(ANCHORS) == []


def test_a_dtype_parameter_that_a_call_passes_is_a_cast_to_it() -> None:
    body = ANCHORS.replace(
        "make_points(feats, self.strides)", "make_points(feats, self.strides, dtype=feats[0].dtype)"
    )
    assert _found(body) == []
