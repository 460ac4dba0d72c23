"""``halfprec lint`` as linters are used: GitHub annotations, ``# noqa``, per-file ignores
and the pre-commit hook (its start without torch: tests/cli/test_startup.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from support import ROOT, SRC

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


def test_github_output_is_one_annotation_per_finding(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "a,b:c.py"  # a comma and a colon must be escaped in a property
    path.write_text(LEAKY)
    done = cli("lint", str(path), "--output-format", "github")
    assert done.returncode == 1
    escaped = str(path).replace(",", "%2C").replace(":", "%3A")
    assert done.stdout.splitlines() == [
        f"::error file={escaped},line=11,col=30,title=HP101::HP101 `torch.ones(...)` "
        "without dtype makes fp32 in a half model; use `x.new_ones(...)`"
    ]


def test_noqa_with_the_code_or_bare_suppresses_like_ruff(tmp_path: Path, cli: Any) -> None:
    line = "        return self.lin(x) + torch.ones(x.shape[-1])"
    for comment, found in [
        ("  # noqa: HP101", 0),
        ("  # noqa: E501, HP101", 0),
        ("  # noqa:HP1", 0),
        ("  # noqa", 0),
        ("  # noqa: E501", 1),
        ("  # halfprec: ignore[HP3]", 1),
    ]:
        path = tmp_path / "m.py"
        path.write_text(LEAKY.replace(line, line + comment))
        done = cli("lint", str(path), "--json")
        assert len(json.loads(done.stdout)["findings"]) == found, comment


def test_per_file_ignores_in_pyproject(tmp_path: Path, cli: Any) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.halfprec.lint.per-file-ignores]\n"tests/*" = ["HP1"]\n"legacy_*.py" = "HP101"\n'
    )
    for rel in ("tests/test_m.py", "src/m.py", "src/legacy_m.py"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(LEAKY)
    done = cli("lint", str(tmp_path), "--json")
    paths = [Path(f["path"]).relative_to(tmp_path) for f in json.loads(done.stdout)["findings"]]
    assert paths == [Path("src/m.py")]
    (tmp_path / "pyproject.toml").write_text(
        '[tool.halfprec.lint]\nper-file-ignores = {"tests/*" = ["XY9"]}\n'
    )
    bad = cli("lint", str(tmp_path))
    assert bad.returncode == 2 and "unknown rule code 'XY9'" in bad.stderr


def _manifest() -> list[dict[str, Any]]:
    from pre_commit.clientlib import load_manifest

    return list(load_manifest(str(ROOT / ".pre-commit-hooks.yaml")))


@pytest.mark.slow
def test_the_pre_commit_hook_runs_in_a_git_repository(tmp_path: Path) -> None:
    """pre-commit itself validates the manifest and runs the system hook on a fresh repo
    (the python hook installs halfprec and torch from the index: not run offline)."""
    pytest.importorskip("pre_commit")
    hooks = {h["id"]: h for h in _manifest()}
    assert hooks["halfprec-lint"]["entry"] == hooks["halfprec-lint-system"]["entry"]
    shim = tmp_path / "bin" / "halfprec"  # `halfprec` of this checkout, first on PATH
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={SRC} exec {sys.executable} -m halfprec "$@"\n')
    shim.chmod(0o755)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "model.py").write_text(LEAKY)
    (repo / "clean.py").write_text("x = 1\n")
    env = {
        "PATH": f"{shim.parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    hooks_repo = tmp_path / "hooks"  # the manifest as a hook repository holds it, committed
    hooks_repo.mkdir()
    (hooks_repo / ".pre-commit-hooks.yaml").write_text(
        (ROOT / ".pre-commit-hooks.yaml").read_text()
    )
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for folder in (repo, hooks_repo):
        subprocess.run([*git, "init", "-q"], cwd=folder, check=True, env=env)
        subprocess.run([*git, "add", "."], cwd=folder, check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "hooks"], cwd=hooks_repo, check=True, env=env)

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pre_commit",
                "try-repo",
                str(hooks_repo),
                "halfprec-lint-system",
                "--all-files",
            ],
            cwd=repo,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )

    failed = run()
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "model.py:11:30: HP101" in failed.stdout
    (repo / "model.py").write_text(LEAKY.replace("torch.ones(", "x.new_ones("))
    passed = run()
    assert passed.returncode == 0, passed.stdout + passed.stderr
