"""A submodule made by a library of data transforms (``torchvision.transforms``,
``kornia.augmentation``) holds no weights, so an fp32 tensor it is given comes out fp32 and
goes on (see :mod:`halfprec.leaks.lint.transforms`): an fp32 noise map rotated by
``v2.RandomAffine`` and blended with the half image is a leak, where any other library's
module ends the walk. Each model here is small and written for this test (torchvision is
not needed: the lint only reads the source)."""

from __future__ import annotations

import torch

from support.lint_models import hp101_lines

V2 = "import torch\nfrom torch import nn\nfrom torchvision.transforms import v2\n\n\n"
T = "import torch\nfrom torch import nn\nimport torchvision.transforms as T\n\n\n"
NAMED = "import torch\nfrom torch import nn\nfrom kornia.augmentation import RandomAffine\n\n\n"
MODELS = "import torch\nimport torchvision\nfrom torch import nn\n\n\n"

ROTATED = """\
    def noise(h, w, device=None):
        return torch.rand(h, w, device=device)


    class Blend(nn.Module):
        def __init__(self):
            super().__init__()
            self.rotate = v2.RandomAffine(degrees=30)

        def perturb(self, h, w, device):
            n = self.rotate(noise(h, w, device)[None])
            return (n > 0.5).float() * n

        def forward(self, img):
            pert = self.perturb(img.shape[-2], img.shape[-1], img.device)
            return img * (1 - pert) + pert
    """


def test_noise_rotated_by_a_transform_of_torchvision_v2_is_reported() -> None:
    # what the transform hands on: fp32 noise (it holds no weights); blended with half
    pert = torch.rand(1, 4, 4)
    img = torch.randn(3, 4, 4).half()
    assert (img * (1 - pert) + pert).dtype == torch.float32
    assert hp101_lines(ROTATED, V2) == [2]


def test_noise_through_a_composed_transform_of_a_module_alias_is_reported() -> None:
    body = ROTATED.replace(
        "v2.RandomAffine(degrees=30)", "T.Compose([T.RandomHorizontalFlip(), T.GaussianBlur(3)])"
    )
    assert hp101_lines(body, T) == [2]


def test_noise_through_a_transform_class_imported_by_name_is_reported() -> None:
    body = ROTATED.replace("v2.RandomAffine(degrees=30)", "RandomAffine(degrees=30.0)")
    assert hp101_lines(body, NAMED) == [2]


def test_noise_through_another_librarys_module_stays_unknown() -> None:
    body = ROTATED.replace("v2.RandomAffine(degrees=30)", "torchvision.models.resnet18()")
    assert hp101_lines(body, MODELS) == []


def test_a_transformed_noise_cast_to_the_image_dtype_stays_silent() -> None:
    body = ROTATED.replace("return img * (1 - pert) + pert", "return img + pert.to(img.dtype)")
    assert hp101_lines(body, V2) == []
