"""Running the CLI in-process (fast) or, for smoke tests, in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from click.testing import CliRunner

from halfprec.bench.budget import STARTED_AT_ENV
from support import SRC


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600, started_at: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``halfprec ARGS`` in this process through click's CliRunner, as a process
    started at ``started_at`` (``time.time()``; default: now) would run it: a command's
    time budget counts from then (:data:`halfprec.bench.budget.STARTED_AT_ENV`).

    Returns what a subprocess would: exit code, stdout and stderr apart. An exception that
    escapes the command is rendered as the interpreter would (traceback on stderr, exit 1),
    so tests that forbid tracebacks still see them.
    """
    from halfprec.cli import main

    runner = CliRunner()
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        started = time.time() if started_at is None else started_at
        result = runner.invoke(
            main,
            list(args),
            prog_name="halfprec",
            catch_exceptions=True,
            env={STARTED_AT_ENV: repr(started)},
        )
    finally:
        os.chdir(old)
    stderr = result.stderr
    code = result.exit_code
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        stderr += "".join(traceback.format_exception(exc))
        code = 1
    return subprocess.CompletedProcess(
        ["halfprec", *args], code, stdout=result.stdout, stderr=stderr
    )


def run_cli_subprocess(
    *args: str, cwd: Path | None = None, timeout: float = 600, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m halfprec ARGS`` from this checkout in a fresh interpreter (``stdin``:
    text typed at its standard input)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "halfprec", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
        preexec_fn=_as_from_a_terminal,
    )


def _as_from_a_terminal() -> None:
    """In the child: Ctrl-C's signal with its default action, as a terminal starts a
    command. A runner started in the background (``nohup ... &``) ignores SIGINT, and an
    ignored signal stays ignored across exec, so Python would never raise KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
