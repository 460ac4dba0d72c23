"""Findings decided by the data flow, not by a statement's shape: a large constant is
reported where it lands in a half tensor, and an fp32 tensor where it meets one. Each model
here is small and written for this test; each "not reported" has a leak of the same shape
beside it that still is."""

from __future__ import annotations

from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F)
_found = LINT.found


# -- HP301: where the constant lands -------------------------------------------------------
def test_a_bias_of_two_numbers_stays_fp32_and_promotes_the_scores() -> None:
    body = """\
        class Local(nn.Module):
            def forward(self, x, keep):
                scores = x @ x.transpose(-1, -2)
                bias = torch.where(keep, 0.0, -3e38)
                return (scores + bias).softmax(-1)
        """
    assert _found(body) == []


def test_a_bias_of_two_numbers_cast_or_added_in_place_lands_in_half() -> None:
    body = """\
        class Local(nn.Module):
            def forward(self, x, keep, near):
                scores = x @ x.transpose(-1, -2)
                bias = torch.where(keep, 0.0, -3e38)
                scores = scores + bias.to(scores.dtype)
                far = torch.where(near, 0.0, -1e12)
                scores += far.transpose(0, 1)
                return scores.softmax(-1)
        """
    assert _found(body) == [(4, "HP301"), (6, "HP301")]


def test_a_bias_made_by_a_helper_is_followed_to_its_cast_in_the_caller() -> None:
    body = """\
        def penalty(keep):
            return torch.where(keep, 0.0, -1e20)


        class Head(nn.Module):
            def forward(self, x, keep):
                return x + penalty(keep).type(x.dtype)
        """
    assert _found(body) == [(2, "HP301")]


def test_an_integer_mask_times_a_large_number_is_fp32() -> None:
    body = """\
        class Span(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(8, 2)

            def forward(self, x, lengths):
                blocked = torch.arange(x.shape[1])[None, :] < lengths[:, None]
                return self.head(x) - blocked[..., None] * 1e7
        """
    # 1e7 lands in an fp32 tensor (a bool mask times a float): no HP301; that fp32 tensor
    # then promotes the half scores, which is HP101's (the arange compared, made fp32)
    assert _found(body) == [(7, "HP101")]


def test_a_float_mask_in_the_model_dtype_times_a_large_number_is_reported() -> None:
    body = """\
        class Span(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(8, 2)

            def forward(self, x, blocked):
                logits = self.head(x)
                return logits - blocked.to(logits.dtype)[..., None] * 1e7
        """
    assert _found(body) == [(8, "HP301")]


def test_a_constant_meeting_data_in_an_explicit_fp32_product_is_not_reported() -> None:
    body = """\
        class Matcher(nn.Module):
            def forward(self, x, boxes):
                inside = x[:, None, 0] > boxes[None, :, 0]
                area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
                cost = inside.to(torch.float32) * (1e9 - area[None, :])
                return cost.min(dim=1).indices
        """
    assert _found(body) == []


def test_a_clamp_bound_on_eigenvalues_is_not_reported_and_on_activations_is() -> None:
    body = """\
        class Whiten(nn.Module):
            def forward(self, x, cov):
                vals, vecs = torch.linalg.eigh(cov)
                vals = torch.clamp(vals, min=1e-6, max=1e8)
                w = vecs @ torch.diag_embed(vals.rsqrt()) @ vecs.transpose(-1, -2)
                return torch.clamp(x, max=1e8) @ w
        """
    assert _found(body) == [(6, "HP301")]


# -- HP101: placeholders, complex tensors, fp32 by the model's own cast ------------------
def test_an_empty_placeholder_replaced_before_use_is_not_reported() -> None:
    body = """\
        class Ladder(nn.Module):
            def __init__(self):
                super().__init__()
                self.ups = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
                self.fuse = nn.MultiheadAttention(8, 2)

            def forward(self, x, q_w, k_w, v_w):
                carry = torch.empty(0)
                started = False
                for up in self.ups:
                    if started:
                        carry = up(x + carry)
                    else:
                        started = True
                        carry = up(x)
                out, _ = F.multi_head_attention_forward(
                    carry, carry, carry, 8, 2, torch.empty([0]), None, None, None, False,
                    0.0, self.fuse.out_proj.weight, None, use_separate_proj_weight=True,
                    q_proj_weight=q_w, k_proj_weight=k_w, v_proj_weight=v_w,
                )
                return out
        """
    assert _found(body) == []


def test_an_empty_accumulator_concatenated_with_half_pieces_is_reported() -> None:
    body = """\
        class Gather(nn.Module):
            def forward(self, x):
                kept = torch.empty(0, x.shape[-1])
                for i in range(x.shape[0]):
                    kept = torch.cat([kept, x[i : i + 1]])
                return kept
        """
    assert _found(body) == [(3, "HP101")]


def test_a_mask_on_a_complex_spectrum_is_not_reported() -> None:
    body = """\
        def covariance(spec, weight=None):
            b, c, f, t = spec.shape
            if weight is None:
                weight = torch.ones(b, 1, f, t)
            cov = torch.einsum("bcft,bdft->bcdf", weight * spec, spec.conj())
            cov /= weight.sum(-1)
            return cov


        class Covariance(nn.Module):
            def forward(self, spec):
                return covariance(spec)
        """
    assert _found(body) == []


def test_a_mask_on_a_real_signal_is_reported() -> None:
    body = """\
        def energy(signal, weight=None):
            b, c, f, t = signal.shape
            if weight is None:
                weight = torch.ones(b, 1, f, t)
            return torch.einsum("bcft,bdft->bcdf", weight * signal, signal)


        class Energy(nn.Module):
            def forward(self, signal):
                return energy(signal)
        """
    assert _found(body) == [(4, "HP101")]


def test_a_default_mask_the_model_casts_to_fp32_for_its_loss_is_not_reported() -> None:
    body = """\
        class Selector(nn.Module):
            def __init__(self):
                super().__init__()
                self.score = nn.Linear(8, 1)

            def forward(self, x, labels, mask=None):
                logits = self.score(x)[..., 0]
                if mask is None:
                    mask = torch.ones(x.shape[:2], device=x.device)
                weight = mask.to(dtype=torch.float)
                picked = torch.distributions.Bernoulli(logits=logits)
                loss = -picked.log_prob(labels)
                loss = (loss * weight).sum(-1) / weight.sum(-1)
                outputs = (logits,)
                return (loss,) + outputs
        """
    assert _found(body) == []


def test_a_default_mask_that_meets_half_after_its_fp32_cast_is_reported() -> None:
    body = """\
        class Selector(nn.Module):
            def __init__(self):
                super().__init__()
                self.score = nn.Linear(8, 1)

            def forward(self, x, mask=None):
                logits = self.score(x)[..., 0]
                if mask is None:
                    mask = torch.ones(x.shape[:2], device=x.device)
                weight = mask.to(dtype=torch.float)
                return logits * weight
        """
    assert _found(body) == [(9, "HP101")]


def test_a_window_on_an_stft_spectrum_is_not_reported_and_on_its_input_is() -> None:
    body = """\
        class Spectrogram(nn.Module):
            def forward(self, wave):
                spec = torch.stft(wave, 64, window=torch.hann_window(64, device=wave.device),
                                  return_complex=True)
                gain = torch.ones(spec.shape[-2], 1, device=wave.device)
                tilt = torch.ones(wave.shape[-1], device=wave.device)
                return (spec * gain).abs(), wave * tilt
        """
    assert _found(body) == [(6, "HP101")]


def test_a_mask_handed_in_times_a_large_number_is_reported() -> None:
    body = """\
        class Scores(nn.Module):
            def forward(self, x, mask):
                scores = x @ x.transpose(-1, -2)
                return (scores + (1.0 - mask[:, None, :]) * -1e9).softmax(-1)
        """
    assert _found(body) == [(4, "HP301")]


def test_an_in_place_fill_of_an_fp32_buffer_is_followed_to_its_cast() -> None:
    body = """\
        class Banded(nn.Module):
            def forward(self, x, far):
                scores = x @ x.transpose(-1, -2)
                bias = torch.zeros(x.shape[1], x.shape[1], device=x.device)
                bias.masked_fill_(far, -1e9)
                kept = torch.zeros(x.shape[1], x.shape[1], device=x.device)
                kept.masked_fill_(far, -1e9)
                return (scores + bias.to(scores.dtype)).softmax(-1), (kept < 0).sum()
        """
    assert _found(body) == [(5, "HP301")]
