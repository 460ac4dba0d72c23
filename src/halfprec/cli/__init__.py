"""The ``halfprec`` command line. The only place that parses strings from the command line.

Each command lives in its own module under ``halfprec.cli`` and is registered in
``_COMMANDS`` below. User errors (:class:`~halfprec.errors.HalfprecError`) print one line
and exit 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

import click

from halfprec.errors import HalfprecError

__all__ = ["main", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]

EXIT_OK = 0
EXIT_FAILED = 1  # the check ran and did not pass (tolerance, findings)
EXIT_USAGE = 2  # bad input: nothing was written

# module name under halfprec.cli -> command name
_COMMANDS: dict[str, str] = {
    "check": "check",
    "convert": "convert",
    "lint": "lint",
    "audit": "audit",
    "export": "export",
    "diagnose": "diagnose",
    "preflight": "preflight",
    "tune": "tune",
    "bench": "bench",
}


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HalfprecError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            click.echo(f"halfprec: error: {_one_line(exc)}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            where = exc.ctx.command_path if exc.ctx is not None else "halfprec"
            click.echo(
                f"halfprec: error: {_one_line(exc.format_message())} (see '{where} --help')",
                err=True,
            )
            ctx.exit(EXIT_USAGE)
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            click.echo(f"halfprec: error: {_one_line(exc)}; check the path", err=True)
            ctx.exit(EXIT_USAGE)


def _one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.version_option(package_name="halfprec")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Run PyTorch models in half precision safely, checked against fp32."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    for module_name, command_name in _COMMANDS.items():
        module = importlib.import_module(f"{__name__}.{module_name}")
        main.add_command(module.command, command_name)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
