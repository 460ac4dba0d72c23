"""Fifteenth-round rules (class A): torch's type promotion by dimension category (a 0-dim
fp32 tensor meeting only dimensioned half tensors keeps them half, where the lint knows the
rank), and an fp32 result written straight back into half storage in the same statement
(``x[..., :n] = x[..., :n] + t``, ``h += t``, ``h.add_(t)``, ``h.copy_(t)``), judged "no
leak [borderline: written back into half]". Each model here is small and written for this
test; each torch fact the rule rests on is checked with torch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from halfprec.leaks.lint import lint_paths, lint_source
from support.lint_models import HEAD, Snippets, package

LINT = Snippets(HEAD)
_found, _module = LINT.lines, LINT.model


GRAM = """\
    class Gram(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            b, n, d = x.shape
            scale = torch.log(1.0 / (torch.tensor(d) * torch.tensor(n)))
            g = self.proj(x)
            g = g.transpose(1, 2) @ g
            return torch.exp(scale) * g
    """


def test_a_0_dim_fp32_factor_of_shape_ints_meeting_a_batched_half_matrix_is_silent() -> None:
    model = _module(GRAM, "Gram")(4).half()
    assert model(torch.randn(2, 3, 4).half()).dtype == torch.float16
    assert _found(GRAM) == []


def test_the_same_factor_meeting_a_0_dim_half_value_is_reported() -> None:
    body = GRAM.replace("return torch.exp(scale) * g", "return torch.exp(scale) * g.mean()")
    model = _module(body, "Gram")(4).half()
    assert model(torch.randn(2, 3, 4).half()).dtype == torch.float32
    assert _found(body) == [8, 8]


def test_the_same_factor_returned_alone_is_reported() -> None:
    body = GRAM.replace("return torch.exp(scale) * g", "return g, torch.exp(scale)")
    assert _found(body) == [8, 8]


def test_a_factor_of_a_name_that_may_hold_a_list_is_still_reported() -> None:
    body = GRAM.replace("def forward(self, x):", "def forward(self, x, d=None):")
    body = body.replace("b, n, d = x.shape", "b, n, _ = x.shape")
    assert _found(body) == [8, 8]  # torch.tensor(d) may be a list: the product's rank unknown


COUNTED = """\
    class Counted(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            h = self.proj(x)
            k = x.size(-1) // 2
            return h * (torch.tensor(k) / x.shape[-1])
    """


def test_an_int_factory_of_a_size_divided_keeps_a_half_activation_half() -> None:
    model = _module(COUNTED, "Counted")(4).half()
    assert model(torch.randn(3, 4).half()).dtype == torch.float16
    assert _found(COUNTED) == []


PHASE = """\
    class Phase(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            h = self.proj(x)
            n = h.shape[-1] // 2
            h[..., :n] = h[..., :n] + torch.rand(h.shape[0], n) * 3.0
            return h
    """


@pytest.mark.parametrize(
    "line",
    [
        "h[..., :n] = h[..., :n] + torch.rand(h.shape[0], n) * 3.0",
        "h += torch.randn(h.shape)",
        "h.add_(torch.randn(h.shape) * 0.5)",
        "h.copy_(h * torch.rand(h.shape))",
        "h[:, 0].mul_(torch.rand(h.shape[0]))",
        "h[0] = torch.rand(h.shape[-1]).clamp(0.1, 1.0) * h[0]",
    ],
)
def test_an_fp32_result_written_back_into_half_storage_is_silent(line: str) -> None:
    body = PHASE.replace("h[..., :n] = h[..., :n] + torch.rand(h.shape[0], n) * 3.0", line)
    with torch.no_grad():
        model = _module(body, "Phase")(4).half()
        assert model(torch.randn(3, 4).half()).dtype == torch.float16
    assert _found(body) == []


@pytest.mark.parametrize(
    "line",
    [
        "h = h + torch.rand(h.shape)",  # rebinding the name is not a write into h
        "h[torch.arange(3)] = h[torch.arange(3)] + torch.rand(3, 4)",  # index_put raises
        "h.lerp_(torch.rand(h.shape), 0.5)",  # lerp_ raises on the dtype mismatch
        "h.index_add_(0, torch.arange(3), torch.rand(3, 4))",  # so does index_add_
    ],
)
def test_an_fp32_result_that_is_not_written_back_is_still_reported(line: str) -> None:
    body = PHASE.replace("h[..., :n] = h[..., :n] + torch.rand(h.shape[0], n) * 3.0", line)
    model = _module(body, "Phase")(4).half()
    with torch.no_grad():
        try:
            dtype = model(torch.randn(3, 4).half()).dtype
        except RuntimeError:
            dtype = None  # raises: a leak that fails at once
    assert dtype != torch.float16
    assert _found(body) == [9]


UNKNOWN_DTYPE = """\
    class Sine(nn.Module):
        def __init__(self, rate):
            super().__init__()
            self.rate = rate

        def phase(self, f0):
            rad = (f0 / self.rate) % 1
            rad[:, 0, :] = rad[:, 0, :] + torch.rand(f0.shape[0], f0.shape[2])
            return torch.sin(torch.cumsum(rad, dim=1))

        def forward(self, x):
            return self.phase(x)
    """


def test_an_fp32_value_written_into_a_slice_of_a_tensor_of_unknown_dtype_is_silent() -> None:
    model = _module(UNKNOWN_DTYPE, "Sine")(16000.0).half()
    assert model(torch.rand(2, 5, 3).half() * 400).dtype == torch.float16
    assert _found(UNKNOWN_DTYPE) == []


def test_a_list_written_into_is_still_followed() -> None:
    body = UNKNOWN_DTYPE.replace("rad = (f0 / self.rate) % 1", "rad = [f0 / self.rate]")
    body = body.replace("rad[:, 0, :] = rad[:, 0, :] + torch.rand", "rad[0] = torch.rand")
    body = body.replace("torch.cumsum(rad, dim=1)", "torch.cumsum(rad[0], dim=1) * f0")
    assert _found(body) == [8]


LOOPED = """\
    def diff(x, d):
        return x.diff(dim=d)


    class Smooth(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            sizes = torch.tensor(x.shape)[1:]
            grads = [diff(self.proj(x), d) for d in range(1, x.ndim)]
            total = 0
            for i, g in enumerate(grads):
                g *= x.shape[i + 1] / sizes[i]
                total = total + g.mean()
            return total
    """


def test_an_fp32_factor_multiplied_in_place_into_a_loop_element_is_silent() -> None:
    with torch.no_grad():
        model = _module(LOOPED, "Smooth")(4).half()
        assert model(torch.randn(3, 5, 4).half()).dtype == torch.float16
    assert _found(LOOPED) == []


def test_the_same_factor_accumulated_into_a_number_is_reported() -> None:
    body = LOOPED.replace("g *= x.shape[i + 1] / sizes[i]", "total += x.shape[i + 1] / sizes[i]")
    body = body.replace("total = total + g.mean()", "total = total * g.mean()")
    assert _found(body) == [11]


SCALED_NOISE = """\
    class Jitter(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            h = self.proj(x)
            eps = 0.05 * torch.max(h, dim=0).values
            noise = torch.rand(h.shape) * eps
            h += noise
            return h
    """


def test_fp32_noise_meeting_the_values_of_a_max_before_its_write_back_is_reported() -> None:
    model = _module(SCALED_NOISE, "Jitter")(4).half()
    with torch.no_grad():
        h = model.proj(torch.randn(3, 4).half())
        assert (torch.rand(h.shape) * torch.max(h, dim=0).values).dtype == torch.float32
    assert _found(SCALED_NOISE) == [9]


_LEVEL = """\
import torch


def level(signal, lengths=None, kind="rms"):
    if kind == "rms":
        out = torch.sqrt((signal ** 2).mean(dim=1, keepdim=True))
    elif kind == "peak":
        out = signal.abs().max(dim=1, keepdim=True)[0]
    else:
        raise ValueError(kind)
    return out
"""

_MIXER = """\
import torch
from torch import nn

from pkg.ops.levels import level


class Mixer(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        h = self.proj(x)
        ratio = torch.rand(h.shape[0], 1, device=h.device)
        lv = level(h)
        scaled = ratio * lv
        h += scaled
        return h
"""


def _mixer(tmp_path: Path) -> Path:
    return package(tmp_path / "pkg", {"ops/levels.py": _LEVEL, "mixer.py": _MIXER})


def test_fp32_meeting_what_a_helper_of_another_file_returns_for_half_input_is_reported(
    tmp_path: Path,
) -> None:
    pkg = _mixer(tmp_path)
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == [("mixer.py", 14)]  # ratio * lv: level(h) is half, the product fp32
    h = torch.randn(3, 4).half()
    rms = torch.sqrt((h**2).mean(dim=1, keepdim=True))
    assert rms.dtype == torch.float16
    assert (torch.rand(3, 1) * rms).dtype == torch.float32


COUNTER_FIRST = """\
    class Schedule(nn.Module):
        def __init__(self, d, every):
            super().__init__()
            self.proj = nn.Linear(d, d)
            self.every = every

        def forward(self, epoch, wav_rec):
            if (epoch + 1) % self.every == 0:
                return self.proj(wav_rec)
            return self.proj(wav_rec) + torch.randn(3, 1)
    """


def test_a_fix_never_anchors_on_a_counter_tested_by_its_remainder() -> None:
    found = [f for f in lint_source(LINT.source(COUNTER_FIRST)) if f.code == "HP101"]
    assert [f.line - HEAD.count("\n") for f in found] == [10]
    assert all("epoch" not in f.message for f in found)
    assert all(f.fix is None or "epoch" not in f.fix.text for f in found)


_BUILD = """\
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(n, d)

    def forward(self, ids):
        return self.embed(ids).transpose(1, 2)


class Aligner(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, feats, alignment):
        h = self.proj(feats)
        return h.transpose(-1, -2) @ alignment


def build(n: int, d: int) -> dict:
    encoder = Encoder(n, d)
    return dict(encoder=encoder, aligner=Aligner(d))
"""

_LOSS = """\
import torch
from torch import nn


class AlignLoss(nn.Module):
    def __init__(self, model, weight=1.0):
        super().__init__()
        self.model = model
        self.weight = weight

    def forward(self, step, feats, ids, frames: int):
        noise = torch.randn(feats.shape[0], feats.shape[1], frames)
        out = self.model.aligner(feats, noise)
        enc = self.model.encoder(ids)
        attn = torch.zeros(ids.shape[0], ids.shape[1], frames)
        attn[:, :, 0] = 1.0
        mixed = (enc @ attn).to(feats.dtype)
        return out.mean() + mixed.mean() * self.weight
"""


def _losses(tmp_path: Path, build: str = _BUILD) -> Path:
    return package(tmp_path / "tts", {"models.py": build, "losses/align.py": _LOSS})


def test_fp32_handed_to_a_module_of_a_dict_the_model_holds_is_reported(tmp_path: Path) -> None:
    pkg = _losses(tmp_path)
    found = sorted((Path(f.path).name, f.line) for f in lint_paths([pkg]).findings)
    assert found == [("align.py", 12), ("align.py", 15)]
    scope: dict[str, object] = {}
    exec(compile(_BUILD, "<build>", "exec"), scope)  # noqa: S102
    aligner = scope["Aligner"](4).half()  # type: ignore[operator]
    with pytest.raises(RuntimeError):  # Half @ Float
        aligner(torch.randn(2, 3, 4).half(), torch.randn(2, 3, 5))


def test_a_key_the_package_binds_to_two_classes_decides_nothing(tmp_path: Path) -> None:
    build = _BUILD + "\n\ndef other(d: int) -> dict:\n    return dict(aligner=Encoder(3, d))\n"
    pkg = _losses(tmp_path, build)
    found = sorted((Path(f.path).name, f.line) for f in lint_paths([pkg]).findings)
    assert found == [("align.py", 15)]  # the encoder's key is still one class
