"""The command group and what every command module shares: the error policy, progress bars, layout names.

Command modules (main, validate_cmds, transform_cmds, hub_cmds) import from
here and main imports them, so no CLI module imports another in a cycle.
Nothing here imports torch.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

import click

from .. import __version__
from ..errors import EagleconvError, Interrupted


def _layout_names() -> tuple[str, ...]:
    """Layout names for --to/--from, from the module names in eagleconv/formats/ (one module per layout).

    Read from the package directory without importing it, so ``--help`` stays
    fast; a test keeps these names equal to the registry's.
    """
    import importlib.util

    from ..registry import entry_modules

    spec = importlib.util.find_spec("eagleconv.formats")
    locations = spec.submodule_search_locations if spec is not None else None
    return entry_modules(locations or [])


FORMATS = _layout_names()


class Context:
    def __init__(self, debug: bool):
        self.debug = debug


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def run_command(ctx: click.Context, as_json: bool, body: Callable[[], tuple[Any, int]]) -> None:
    """Run ``body`` (returning (report, exit code)) with eagleconv's error policy."""
    state = ctx.find_object(Context)
    debug = state.debug if state is not None else False
    try:
        report, code = body()
    except EagleconvError as exc:
        if debug:
            traceback.print_exc()
        if as_json:
            click.echo(json.dumps({"ok": False, "error": exc.one_line(), "code": exc.code, "exit_code": exc.exit_code}))
        click.echo(f"eagleconv: error: {exc.one_line()}", err=True)
        ctx.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("eagleconv: interrupted by SIGINT", err=True)
        ctx.exit(130)
    except Interrupted as exc:
        click.echo(f"eagleconv: {exc}", err=True)
        ctx.exit(exc.exit_code)
    except (click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # noqa: BLE001 - the policy: one line, no traceback unless --debug
        if debug:
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        click.echo(f"eagleconv: internal error: {type(exc).__name__}: {first} (re-run with --debug for the traceback)",
                   err=True)
        ctx.exit(2)
    else:
        ctx.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="eagleconv")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Convert and validate EAGLE-3 / EAGLE-3.1 speculative-decoding drafter checkpoints.

    Exit codes: 0 success, 1 error-severity findings, 2 bad usage or unreadable/unsafe input.
    """
    ctx.obj = Context(debug)


class _progress:
    """A rich progress bar over bytes processed, shown only on a terminal.  Yields (on_total, on_bytes)."""

    def __init__(self, enabled: bool, label: str = "writing"):
        self.enabled = enabled and sys.stderr.isatty()
        self.label = label
        self.bar: Any = None  # rich.progress.Progress, imported only when shown
        self.task: Any = None

    def __enter__(self):
        if not self.enabled:
            return None, None
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

        self.bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                            TransferSpeedColumn(), console=_console(stderr=True), transient=True)
        self.bar.start()

        def on_total(total: int) -> None:
            self.task = self.bar.add_task(self.label, total=total)

        def on_bytes(n: int) -> None:
            if self.task is not None:
                self.bar.advance(self.task, n)

        return on_total, on_bytes

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
