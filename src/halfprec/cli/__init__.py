"""The ``halfprec`` command line. The only place that parses strings from the command line.

Each command lives in its own module under ``halfprec.cli`` and is registered in
``_COMMANDS`` below; a command's module is imported only when that command runs or shows
its help, and those modules import torch and the library inside the command, so
``--version``, ``--help``, usage errors and ``lint`` start without torch. Every way a
command ends is one of the exit codes below, and every
error is one line on stderr (``--debug`` adds the traceback):

- user errors (:class:`~halfprec.errors.HalfprecError`, click's usage errors, a config
  value out of range given as a flag, and the system's file errors on a path: disk full,
  permission denied, ...) exit 2 with ``halfprec: error: ...``;
- any other exception is a bug (in halfprec, or in the model's own code): exit 3 with
  ``halfprec: internal error: ...``, naming where it was raised;
- Ctrl-C exits 130, the shell's code for SIGINT, with ``halfprec: interrupted ...``;
- SIGTERM (what ``timeout``, systemd, Docker and Kubernetes send) runs the same clean-up
  and exits 143 (128 + SIGTERM) with ``halfprec: terminated ...``.

While a command runs, SIGXFSZ is ignored, so a write past the file-size limit
(``ulimit -f``) fails with EFBIG and is reported as any full disk is, instead of killing
the process mid-write.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

import click

from halfprec.errors import HalfprecError, ReferenceFailedError
from halfprec.io.spec_names import BUILTIN_MODELS

__all__ = [
    "main",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "Terminated",
]

EXIT_OK = 0
EXIT_FAILED = 1  # the check ran and did not pass (tolerance, findings)
EXIT_USAGE = 2  # bad input: nothing was written
EXIT_INTERNAL = 3  # an exception halfprec did not raise on purpose: a bug
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)

# command name (and its module under halfprec.cli) -> its line in ``halfprec --help``
_COMMANDS: dict[str, str] = {
    "check": "Compare MODEL in half precision against fp32; exit 1 when out of tolerance.",
    "convert": "Convert MODEL to half precision and save it (safetensors or a folder).",
    "export": "Export MODEL in half precision (.pt2, TorchScript or ONNX), checked.",
    "diagnose": "Find the module where MODEL diverges in half precision, and why.",
    "preflight": "Check MODEL's weights and constants against a half dtype.",
    "tune": "Find fp32 islands so MODEL meets the tolerance in half; write a recipe.",
    "bench": "Time MODEL in fp32 and each half-precision variant.",
    "deploy": "Choose the fastest checked way to run MODEL here, and write it.",
    "audit": "Run MODEL in half and report every dtype leak by source line.",
    "lint": "Find dtype leaks in the forward code of nn.Modules under PATHS.",
}


class _Group(click.Group):
    """Turns every error into one stderr line and its exit code (``--debug``: the traceback).

    Commands load on first use (click's lazy group): listing them needs only their names
    and the one-line help in ``_COMMANDS``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        if cmd_name not in self.commands:
            module = importlib.import_module(f"{__name__}.{cmd_name}")
            command: click.Command = module.command
            command.short_help = _COMMANDS[cmd_name]
            if any(p.name == "model" for p in command.params):
                command.epilog = MODEL_SAFETY  # say plainly where code runs
            self.add_command(command, cmd_name)
        return self.commands[cmd_name]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(list(_COMMANDS.items()))

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Built-in models (MODEL builtin:NAME) [default: builtin:minilm]"):
            formatter.write_dl([(name, what) for name, what in BUILTIN_MODELS.items()])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with _signals():
                return super().invoke(ctx)
        except HalfprecError as exc:
            built = (ctx.obj or {}).get("inputs_built")
            message = str(exc)
            if built and isinstance(exc, ReferenceFailedError):
                message = exc.built_by_halfprec(built)
            _fail(ctx, _one_line(message), exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "halfprec"
            _fail(ctx, f"{_one_line(exc.format_message())} (see '{where} --help')", EXIT_USAGE)
        except (click.exceptions.Exit, click.Abort, click.ClickException):
            raise  # click's own ways to end (ctx.exit is a RuntimeError)
        except OSError as exc:
            if _about_a_file(exc):
                _fail(ctx, _os_error(exc), EXIT_USAGE)
            else:
                _fail(ctx, _internal(exc), EXIT_INTERNAL, "internal error")
        except SystemExit as exc:  # sys.exit() in the model's code: click exits by Exit
            _fail(ctx, _internal(exc), EXIT_INTERNAL, "internal error")
        except Terminated:
            message = "terminated (SIGTERM); a file being written was left as it was before"
            _fail(ctx, message, EXIT_TERMINATED, kind=None)
        except KeyboardInterrupt:
            message = "interrupted (Ctrl-C); a file being written was left as it was before"
            _fail(ctx, message, EXIT_INTERRUPTED, kind=None)
        except Exception as exc:
            _fail(ctx, _internal(exc), EXIT_INTERNAL, "internal error")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program was, so every clean-up that Ctrl-C runs runs."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up
    raise Terminated


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` and SIGXFSZ is ignored while a command runs; the
    caller's handlers are restored after (only the main thread can set them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted: dict[signal.Signals, Any] = {signal.SIGTERM: _terminate}
    if hasattr(signal, "SIGXFSZ"):
        wanted[signal.SIGXFSZ] = signal.SIG_IGN
    old = {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())


def _fail(ctx: click.Context, message: str, code: int, kind: str | None = "error") -> None:
    if ctx.obj and ctx.obj.get("debug"):
        traceback.print_exc()
    click.echo(f"halfprec: {kind}: {message}" if kind else f"halfprec: {message}", err=True)
    ctx.exit(code)


def _internal(exc: BaseException) -> str:
    """A bug's one line: the exception, where it was raised, and how to see more."""
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    where = f" (raised at {last.filename}:{last.lineno}, in {last.name})" if last else ""
    text = _one_line(exc) or type(exc).__name__
    return (
        f"{type(exc).__name__}: {text[:300]}{where}; this is not an error "
        "halfprec checks for: if that code is your model's, fix it there, else it is a bug "
        "in halfprec (please report it); add --debug before the command for the traceback"
    )


def _about_a_file(exc: OSError) -> bool:
    """The system's error about a path (or halfprec's own OSError message): the user's."""
    return exc.strerror is None or exc.filename is not None or exc.errno in _OS_FIXES


_OS_FIXES = {
    errno.ENOSPC: "the disk is full; free some space or write elsewhere",
    errno.EROFS: "the file system is read-only; write to a writable folder",
    errno.ENOTDIR: "a part of the path is a file, not a folder; check the path",
    errno.EISDIR: "it is a folder; give a file path",
    errno.EACCES: "permission denied; check the file and folder permissions",
    errno.EPERM: "operation not permitted; check the file and folder permissions",
    errno.ENOENT: "no such file or folder; check the path",
    errno.EDQUOT: "the disk quota is exceeded; free some space or write elsewhere",
    errno.EFBIG: "the file would pass the file-size limit (ulimit -f); raise it or write elsewhere",
}


def _os_error(exc: OSError) -> str:
    """``OSError`` as one line: our own messages as they are, the system's with the fix."""
    if exc.strerror is None:  # raised by halfprec with a message that names the fix
        return _one_line(exc)
    where = exc.filename if exc.filename is not None else "a file"
    fix = _OS_FIXES.get(exc.errno or 0, f"{exc.strerror.lower()}; check the path")
    return f"cannot use {where}: {fix}"


# show_default: every command's options show their defaults the one way click does,
# "[default: 10]", or "[default: (what an unset option means)]" where their default is None
@click.group(
    cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "show_default": True}
)
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.version_option(package_name="halfprec")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Run PyTorch models in half precision safely, checked against fp32."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


MODEL_SAFETY = (
    "MODEL is builtin:NAME, package.module:factory, path/to/file.py:factory, a Hugging "
    "Face directory or a TorchScript file [default: builtin:minilm]. A "
    "module:factory or file.py:factory spec imports and RUNS that Python code, and a "
    "TorchScript file (as MODEL or --artifact) runs the TorchScript program inside it: name "
    "only code you trust. Weights, inputs, checkpoints, policies and .pt2/.onnx artifacts "
    "are read as data and never run code "
    "(docs/safety.md)."
)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
