"""exact_fp32: IEEE fp32 inside, every setting restored after, never a legacy/new API mix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from halfprec.fp32 import exact_fp32, fp32_settings, reduced_fp32


@pytest.fixture
def restore_precision() -> Iterator[None]:
    """Leave the process's precision settings as the test found them."""
    b = torch.backends
    leaves = [
        b.cuda.matmul,
        b.cudnn.conv,
        b.cudnn.rnn,
        b.mkldnn.matmul,
        b.mkldnn.conv,
        b.mkldnn.rnn,
    ]
    old = [leaf.fp32_precision for leaf in leaves]
    yield
    for leaf, value in zip(leaves, old, strict=True):
        leaf.fp32_precision = value


@pytest.mark.usefixtures("restore_precision")
def test_the_new_tf32_api_set_by_a_user_is_ieee_inside_and_restored_after() -> None:
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    assert "CUDA matmuls in tf32" in reduced_fp32()
    assert "oneDNN matmuls in bf16" in reduced_fp32()
    with exact_fp32():
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert torch.backends.mkldnn.matmul.fp32_precision == "ieee"
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"
        assert reduced_fp32() == ()
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"


@pytest.mark.usefixtures("restore_precision")
def test_legacy_flags_read_back_unchanged_after_the_block() -> None:
    # the legacy API, then exact_fp32 (which uses only the new one): no "mix of APIs" error
    torch.backends.cuda.matmul.allow_tf32 = True
    with exact_fp32():
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert torch.backends.cuda.matmul.allow_tf32 is True
    torch.backends.cuda.matmul.allow_tf32 = False
    assert torch.backends.cuda.matmul.allow_tf32 is False


@pytest.mark.usefixtures("restore_precision")
def test_settings_are_restored_when_the_block_raises() -> None:
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    with pytest.raises(KeyError), exact_fp32():
        raise KeyError("boom")
    assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"


@pytest.mark.usefixtures("restore_precision")
def test_matmuls_inside_are_ieee_even_where_the_process_asked_for_bf16() -> None:
    # on a CPU with native bf16 oneDNN honours the bf16 setting; on others it is a no-op:
    # either way the result inside the block equals IEEE fp32 within fp32 rounding
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 64, generator=g)
    exact = (a.double() @ b.double()).float()
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    with exact_fp32():
        inside = a @ b
    assert (inside - exact).abs().max().item() < 1e-3


@pytest.mark.usefixtures("restore_precision")
def test_fp32_settings_name_each_leaf_of_the_device_with_none_resolved_by_its_parents() -> None:
    """What the report says fp32 was timed with: each leaf as torch computes it, "none"
    read from its parent (torch.backends.mkldnn here), "ieee" where no level sets it."""
    b = torch.backends
    for leaf in (b.mkldnn.matmul, b.mkldnn.conv, b.mkldnn.rnn, b.cuda.matmul):
        leaf.fp32_precision = "none"
    old_parent = b.mkldnn.fp32_precision
    try:
        assert fp32_settings("cpu") == "matmul ieee, onednn conv ieee, onednn rnn ieee"
        b.mkldnn.fp32_precision = "bf16"
        b.mkldnn.conv.fp32_precision = "ieee"
        assert fp32_settings("cpu") == "matmul bf16, onednn conv ieee, onednn rnn bf16"
        b.cuda.matmul.fp32_precision = "tf32"
        b.cudnn.conv.fp32_precision = "tf32"
        assert fp32_settings("cuda:0").startswith("matmul tf32, cudnn conv tf32, cudnn rnn ")
        assert fp32_settings("meta") == ""
    finally:
        b.mkldnn.fp32_precision = old_parent
