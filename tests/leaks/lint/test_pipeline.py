"""Data-pipeline transforms that are ``nn.Module`` classes: an image in, data-loader tensors
out, never converted to half, so their factories are not reported. Each model here is
small and written for this test; beside each transform that is skipped, one of the same
shape that a half model can reach is still reported."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from halfprec.leaks.lint import LintConfig, lint_paths
from support.lint_models import Snippets

HEAD = (
    "import numpy as np\nimport torch\nfrom PIL import Image\nfrom torch import nn\n"
    "from typing import Optional, Union\n\n\n"
)
LINT = Snippets(HEAD)
_found = LINT.found

CROP = """\
    class CropWithGrid(nn.Module):
        def __init__(self, cells: int = 7):
            super().__init__()
            self.cells = int(cells)
            self.flip = FlipWithBox()

        def forward(self, img: Image.Image):
            img, box = self.flip(img, (0.0, 0.0, 1.0, 1.0))
            return img, self.grid(box)

        def grid(self, box):
            xs = torch.linspace(box[0], box[2], self.cells)
            ys = torch.linspace(box[1], box[3], self.cells)
            return torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1)


    class FlipWithBox(nn.Module):
        def forward(self, img: "Image.Image", box):
            if torch.rand(1) < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
                box = (1.0 - box[2], box[1], 1.0 - box[0], box[3])
            return img, box
    """


def test_a_crop_transform_on_a_pil_image_makes_data_not_activations() -> None:
    assert _found(CROP) == []


def test_a_transform_on_a_numpy_array_is_skipped_too() -> None:
    body = """\
        class Jitter(nn.Module):
            def forward(self, frame: Optional[np.ndarray] = None):
                height, width = frame.shape[:2]
                return torch.from_numpy(frame), torch.rand(height, width)
        """
    assert _found(body) == []
    assert _found(body.replace("Optional[np.ndarray]", "np.ndarray")) == []


def test_the_same_transform_held_by_a_model_is_reported() -> None:
    body = (
        CROP
        + """

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.crop = CropWithGrid()
            self.proj = nn.Linear(2, 8)

        def forward(self, img):
            _, grid = self.crop(img)
            return self.proj(grid)
    """
    )
    assert _found(body) == [(12, "HP101"), (13, "HP101")]


@pytest.mark.parametrize(
    "annotation",
    ["torch.Tensor", "Union[Image.Image, torch.Tensor]", "Image.Image | torch.Tensor", ""],
)
def test_an_input_that_may_be_a_tensor_keeps_the_findings(annotation: str) -> None:
    spelled = f"img: {annotation}" if annotation else "img"
    assert len(_found(CROP.replace("img: Image.Image", spelled))) == 2


def test_a_module_with_weights_that_takes_an_image_is_a_model() -> None:
    body = """\
        class Captioner(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(2, 8)

            def forward(self, img: Image.Image):
                grid = torch.linspace(0, 1, 4)
                return self.proj(grid)
        """
    assert _found(body) == [(7, "HP101")]


def test_a_helper_a_model_calls_too_stays_linted() -> None:
    body = """\
        def grid(n):
            return torch.linspace(0, 1, n)


        class Crop(nn.Module):
            def forward(self, img: Image.Image):
                return img, grid(7)


        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(7, 7)

            def forward(self, x):
                return self.proj(x) + grid(7)
        """
    assert _found(body) == [(2, "HP101")]


def test_image_types_come_from_the_imports() -> None:
    from halfprec.leaks.lint.pipeline import image_modules  # here: the others run without it

    tree = ast.parse("import PIL.Image as P\nimport numpy as onp\nfrom numpy import ndarray\n")
    assert image_modules(tree) == (frozenset({"P"}), frozenset({"onp.ndarray", "ndarray"}))


JITTER = """\
    import torchvision.transforms as T
    from torchvision.transforms import v2


    class Crop(v2.RandomCrop):
        pass


    class CropWithBox(Crop):
        def forward(self, img):
            box = torch.rand(4) * torch.tensor(self.size * 2)
            return super().forward(img), box
    """


def test_a_subclass_of_a_torchvision_transform_makes_data() -> None:
    assert _found(JITTER) == []


def test_a_torchvision_transform_subclass_fed_a_tensor_or_held_by_a_model_is_linted() -> None:
    annotated = JITTER.replace("def forward(self, img)", "def forward(self, img: torch.Tensor)")
    assert _found(annotated) == [(11, "HP101")]
    held = (
        JITTER
        + """

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.crop = CropWithBox(8)
            self.head = nn.Linear(4, 4)

        def forward(self, img):
            img, box = self.crop(img)
            return self.head(box)
    """
    )
    assert _found(held) == [(11, "HP101")]


SHIFT = """\
    from torch.utils.data import Dataset


    class RandomGain(nn.Module):
        def forward(self, wave):
            return wave * (0.5 + torch.rand(wave.shape[0], 1))


    class Clips(Dataset):
        def __init__(self, waves):
            self.waves = waves
            self.gain = RandomGain()

        def __getitem__(self, i):
            return self.gain(self.waves[i])
    """


def test_a_module_a_dataset_makes_runs_on_loader_data() -> None:
    assert _found(SHIFT) == []


def test_a_module_a_collate_function_makes_runs_on_loader_data() -> None:
    body = """\
        class Pad(nn.Module):
            def forward(self, waves):
                out = torch.zeros(len(waves), max(w.shape[-1] for w in waves))
                for i, w in enumerate(waves):
                    out[i, : w.shape[-1]] = w
                return out


        def collate(batch):
            return Pad()(batch)


        def loader(clips):
            return torch.utils.data.DataLoader(clips, batch_size=4, collate_fn=collate)
        """
    assert _found(body) == []


def test_a_module_a_dataset_and_a_model_both_make_is_linted() -> None:
    body = (
        SHIFT
        + """

    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = RandomGain()
            self.net = nn.Conv1d(1, 1, 3)

        def forward(self, wave):
            return self.net(self.gain(wave))
    """
    )
    assert _found(body) == [(6, "HP101")]


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("import torchvision.transforms.v2 as T", {"T"}),
        ("from torchvision import transforms", {"transforms"}),
        ("from torchvision.transforms import RandomCrop as Crop", {"Crop"}),
        ("import torchvision", {"torchvision.transforms"}),
        ("from .transforms import Crop", set()),
    ],
)
def test_transform_classes_come_from_the_imports(source: str, names: set[str]) -> None:
    from halfprec.leaks.lint.pipeline import names_of

    assert names_of(ast.parse(source), "torchvision.transforms") == names


@pytest.mark.parametrize("holder", ["module", "dataset"])
def test_a_transform_another_file_holds_in_a_module_is_linted(tmp_path: Path, holder: str) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "augment.py").write_text(LINT.source(CROP))
    user = """\
        from torch import nn
        from torch.utils.data import Dataset

        from .augment import CropWithGrid


        class Views(Dataset):
            def __init__(self):
                self.crop = CropWithGrid()
        """
    if holder == "module":
        user += """

        class Locator(nn.Module):
            def __init__(self):
                super().__init__()
                self.crop = CropWithGrid()

            def forward(self, img):
                return self.crop(img)[1]
        """
    (package / "views.py").write_text(textwrap.dedent(user))
    report = lint_paths([package / "augment.py"], LintConfig())
    lines = [f.line - 7 for f in report.files[0].findings]
    assert lines == ([12, 13] if holder == "module" else [])
