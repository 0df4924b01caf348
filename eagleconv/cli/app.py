"""The command group and what every command module shares: the error policy, progress bars, layout names.

Command modules (main, validate_cmds, transform_cmds, hub_cmds) import from
here and main imports them, so no CLI module imports another in a cycle.
Nothing here imports torch.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TextIO

import click

from .._version import __version__
from .._text import printable
from ..errors import EagleconvError, Interrupted

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn, Task, TaskID
    from rich.segment import Segment


def _layout_names() -> tuple[str, ...]:
    """Layout names for --to/--from, from the module names in eagleconv/formats/ (one module per layout).

    Read from the package directory without importing it, so ``--help`` stays
    fast; a test keeps these names equal to the registry's.
    """
    import importlib.util

    from ..support.registry import entry_modules

    spec = importlib.util.find_spec("eagleconv.formats")
    locations = spec.submodule_search_locations if spec is not None else None
    return entry_modules(locations or [])


FORMATS = _layout_names()


class Context:
    def __init__(self, debug: bool):
        self.debug = debug


PIPE_WIDTH = 10_000  # columns of output that is not a terminal: tables take the width their content needs


def columns() -> int | None:
    """The width the user asked for in COLUMNS (a positive integer), else None."""
    value = os.environ.get("COLUMNS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def plain_layout() -> bool:
    """Whether tables are drawn plain: stdout is not a terminal (a pipe, a file, a CI log) and COLUMNS is unset.
    Then each row is one line, without box drawing, as wide as its content, so no name is ever cut or folded."""
    if columns() is not None:
        return False
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):  # no stdout, or a closed one
        return True


def _console(stderr: bool = False):
    """A rich console: COLUMNS wide when COLUMNS is set (a terminal or not); otherwise the terminal's width, or
    for a pipe or a file as wide as the content (:func:`plain_layout`).  Cells that do not fit fold onto more
    lines (render.table) instead of being cut."""
    from rich.console import Console
    from rich.segment import Segment

    class _Safe(Console):
        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            """Text from anywhere (a server's version, a tensor name) is shown with its control characters
            escaped, whichever field carried it; only rich's own control segments (cursor moves) stay codes."""
            return super()._render_buffer(s if s.control else Segment(_visible(s.text), s.style) for s in buffer)

    class _Plain(_Safe):
        def _render_buffer(self, buffer: Iterable[Segment]) -> str:  # rows padded to the widest one end in spaces: drop them
            return "\n".join(line.rstrip(" ") for line in super()._render_buffer(buffer).split("\n"))

    plain = not stderr and plain_layout()
    console = (_Plain if plain else _Safe)(stderr=stderr, highlight=False, soft_wrap=True)
    width = columns()
    if width is not None:
        console.width = width
    elif not console.is_terminal:
        console.width = PIPE_WIDTH
    return console


def _visible(text: str) -> str:
    """``text`` with every control character but the line breaks and tabs of the layout escaped."""
    return text if text.isprintable() else "\n".join(printable(line.replace("\t", " ")) for line in text.split("\n"))


def run_command(ctx: click.Context, as_json: bool, body: Callable[[], tuple[object, int]]) -> None:
    """Run ``body`` (returning (report, exit code)) with eagleconv's error policy."""
    state = ctx.find_object(Context)
    debug = state.debug if state is not None else False
    try:
        report, code = body()
    except EagleconvError as exc:
        if debug:
            traceback.print_exc()
        if as_json:
            _json_error(exc.one_line(), exc.code, exc.exit_code)
        _say(f"eagleconv: error: {exc.one_line()}")
        ctx.exit(exc.exit_code)
    except KeyboardInterrupt:
        _say("eagleconv: interrupted by SIGINT")
        ctx.exit(130)
    except Interrupted as exc:
        _say(f"eagleconv: {exc}")
        ctx.exit(exc.exit_code)
    except (click.exceptions.Exit, click.ClickException):
        raise
    except BrokenPipeError as exc:
        if _stdout_closed():
            raise  # click's main ends quietly (exit 1), as Python's "Note on SIGPIPE" does
        _internal_error(ctx, exc, as_json, debug)
    except OSError as exc:
        if not _stdout_unwritable(exc):
            _internal_error(ctx, exc, as_json, debug)
        _stdout_lost(exc)
        ctx.exit(2)
    except Exception as exc:  # noqa: BLE001 - the policy: one line, no traceback unless --debug
        _internal_error(ctx, exc, as_json, debug)
    else:
        ctx.exit(code)


def _internal_error(ctx: click.Context, exc: Exception, as_json: bool, debug: bool) -> None:
    """An exception eagleconv did not expect: one line (a traceback with --debug), exit 2."""
    if debug:
        traceback.print_exc()
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = printable(f"internal error: {type(exc).__name__}: {first} (re-run with --debug for the traceback)")
    if as_json:
        _json_error(line, None, 2)
    _say(f"eagleconv: {line}")
    ctx.exit(2)


def _stdout_closed() -> bool:
    """Whether stdout's reader went away (``| head`` exited), so a BrokenPipeError is the reader's doing.

    A pipe whose reading end is closed polls as POLLERR on its writing end; a BrokenPipeError
    from another pipe (a child process, a socket) leaves stdout writable and stays an internal error.
    """
    import select

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):  # no poll (Windows): a broken pipe there is most likely stdout's
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _json_error(message: str, code: str | None, exit_code: int) -> None:
    """The --json failure object (schemas/error.schema.json), on stdout where the report would have been."""
    from ..spec.report import ErrorReport

    try:
        click.echo(ErrorReport(ok=False, error=message, code=code, exit_code=exit_code).model_dump_json())
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # Nobody reads stdout: the error still goes to stderr with its own exit code.  What stays
        # buffered goes to /dev/null at exit (Python's "Note on SIGPIPE"), not into an 'Exception ignored'.
        _discard_stdout()
    except OSError:
        _discard_stdout()  # stdout is full or failing: the error line on stderr is all that can be said


# A write that found no room. eagleconv's own writes report these as DestinationError (naming the destination),
# so one that ends a command unhandled was a write to stdout: a report piped into a full disk, or ``> /dev/full``.
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _stdout_unwritable(exc: OSError) -> bool:
    """Whether the OSError that ended a command was stdout's: no room for it, or stdout cannot even be flushed."""
    if exc.errno in _NO_ROOM:
        return True
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        return True
    return False


def _stdout_lost(exc: OSError) -> None:
    """stdout failed (``> /dev/full``): one line on stderr, exit 2; what the command wrote elsewhere is complete."""
    _discard_stdout()
    reason = exc.strerror or str(exc)
    _say(f"eagleconv: error: stdout: cannot be written ({reason}); the command itself finished, and anything it "
         "wrote elsewhere (a destination) is complete")


def _say(line: str) -> None:
    """One line on stderr; a stderr that cannot take it (``2> /dev/full``) leaves the exit status to say it."""
    try:
        click.echo(line, err=True)
    except OSError:
        pass


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so what it still buffers is not retried at exit into an 'Exception ignored'."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        pass


class _Command(click.Command):
    """A command whose summary in ``eagleconv --help`` is its whole first sentence, wrapped, never cut with '...'."""

    def get_short_help_str(self, limit: int = 45) -> str:
        return super().get_short_help_str(limit=10_000)  # click cuts at ~45-65 columns; the listing wraps instead

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """click's own usage errors (a missing argument, a missing ``--to``, a bad choice) under ``--json``: the one
        ``{"ok": false, ...}`` object on stdout and its line on stderr, exit 2, as every other failure (README "Exit
        codes"); without ``--json``, click's usage text."""
        given = args[:args.index("--")] if "--" in args else list(args)  # click's parser consumes ``args``
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            wants_json = "--json" in given
            if not (wants_json and any("--json" in getattr(p, "opts", ()) for p in self.params)):
                raise
            line = printable(" ".join(exc.format_message().split()))
            _json_error(line, None, exc.exit_code)
            _say(f"eagleconv: error: {line}")
            raise click.exceptions.Exit(exc.exit_code) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="eagleconv")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Convert and validate EAGLE-3 / EAGLE-3.1 speculative-decoding drafter checkpoints.

    Exit codes: 0 success, 1 error-severity findings, 2 bad usage or unreadable/unsafe input.
    """
    ctx.obj = Context(debug)


cli.command_class = _Command  # every @cli.command() is one


class _progress:
    """rich progress bars on stderr, shown only when stderr is a terminal (so a pipe, a log file or ``--json``'s
    stdout never sees them; ``--json`` with a terminal on stderr still shows them there).

    ``with _progress(label) as bar``: ``bar.on_total``/``bar.on_bytes`` drive a bar over bytes (the library's
    ``on_total``/``on_bytes`` callbacks; ``bar.bytes`` is the pair), ``bar.step(what, done, total)`` a bar over
    counted units (forward runs, simulate's tokens), one line per ``what``; ``bar.byte_step`` the same over bytes
    (the Hub's copy, upload and download steps).  All None when not shown.
    Sizes are binary (KiB, MiB, GiB), as every size eagleconv prints.
    """

    def __init__(self, enabled: bool = True, label: str = "writing"):
        self.enabled = enabled and _is_terminal(sys.stderr)
        self.label = label
        self.bar: Progress | None = None  # imported only when shown
        self.task: TaskID | None = None
        self.steps: dict[str, TaskID] = {}
        self.on_total: Callable[[int], None] | None = None
        self.on_bytes: Callable[[int], None] | None = None
        self.step: Callable[[str, int, int], None] | None = None
        self.byte_step: Callable[[str, int, int], None] | None = None

    @property
    def bytes(self) -> tuple[Callable[[int], None] | None, Callable[[int], None] | None]:
        return self.on_total, self.on_bytes

    def __enter__(self) -> _progress:
        if not self.enabled:
            return self
        from rich.progress import BarColumn, Progress, SpinnerColumn, TimeElapsedColumn

        self.bar = bar = Progress(SpinnerColumn(), "[progress.description]{task.description}", BarColumn(),
                                  _amount_column(), TimeElapsedColumn(), console=_console(stderr=True), transient=True)
        bar.start()
        self.on_total, self.on_bytes, self.step = self._on_total, self._on_bytes, self._step
        self.byte_step = self._byte_step
        return self

    def _shown(self) -> Progress:
        """The bar; the callbacks that use it are installed only once it exists (``__enter__``)."""
        if self.bar is None:
            raise RuntimeError("progress callback used outside its 'with' block")
        return self.bar

    def _on_total(self, total: int) -> None:
        self.task = self._shown().add_task(self.label, total=total, bytes=True)

    def _on_bytes(self, n: int) -> None:
        if self.task is not None:
            self._shown().advance(self.task, n)

    def _step(self, what: str, done: int, total: int, in_bytes: bool = False) -> None:
        bar = self._shown()
        if what not in self.steps:
            self.steps[what] = bar.add_task(what, total=total, bytes=in_bytes)
        bar.update(self.steps[what], completed=done, total=total)

    def _byte_step(self, what: str, done: int, total: int) -> None:
        self._step(what, done, total, in_bytes=True)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a terminal; a stream Python left None (stderr closed at start-up) or closed is not."""
    try:
        return bool(stream is not None and stream.isatty())
    except (OSError, ValueError):
        return False


def _amount_column() -> ProgressColumn:
    """'1.2 GiB/3.4 GiB 210.0 MiB/s' for a bar over bytes, '3/8' for one over counted units."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    from .._text import human_bytes

    class Amount(ProgressColumn):
        def render(self, task: Task) -> Text:
            total = int(task.total) if task.total is not None else 0
            if not task.fields.get("bytes"):
                return Text(f"{int(task.completed)}/{total}", style="progress.download")
            speed = f" {human_bytes(int(task.speed))}/s" if task.speed else ""
            return Text(f"{human_bytes(int(task.completed))}/{human_bytes(total)}{speed}", style="progress.download")

    return Amount()
