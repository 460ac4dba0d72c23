"""``halfprec lint`` as linters are used: a fast start without torch, GitHub annotations,
``# noqa``, per-file ignores and the pre-commit hook."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import SRC

LEAKY = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Tail(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x):
            return self.lin(x) + torch.ones(x.shape[-1])
    """
)

_PROBE = """
import sys
from halfprec.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("torch", "numpy") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


@pytest.mark.slow
@pytest.mark.parametrize("args", [("lint", "--help"), ("lint", "{path}")])
def test_lint_starts_without_importing_torch_or_numpy(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    path = tmp_path / "model.py"
    path.write_text(LEAKY)
    argv = [a.format(path=path) for a in args]
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert "HEAVY=" in done.stdout, done.stderr
    assert done.stdout.split("HEAVY=")[1].strip() == "", done.stdout
    if args[-1] == "{path}":
        assert "HP101" in done.stdout
