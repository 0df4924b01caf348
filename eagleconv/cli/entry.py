"""The ``eagleconv`` executable's entry point: the process's edges first, then the click app.

Closed standard streams get /dev/null and the signal handlers are installed before click, rich, pydantic or
torch are imported, so a signal at any moment from start-up ends in one line and exit 128+N (130 SIGINT,
143 SIGTERM, 129 SIGHUP), never a traceback, never click's "Aborted!" and exit 1 (which means findings).  A stdout
whose reader went away (``| head``) ends quietly with 141, as a process killed by SIGPIPE would, not click's 1.
"""

from __future__ import annotations

import sys

import os

from ..support._process import exit_on_termination, open_missing_std_streams, raise_on_termination, received_signal
from ..errors import Interrupted

STDOUT_CLOSED = 141  # 128 + SIGPIPE: the reader of stdout went away (README "Exit codes")
_STDOUT_AT_START: tuple[int, int] | None = None  # fd 1's file when main began (rich points it at /dev/null on EPIPE)


def main(hard_exit: bool = True) -> None:
    """``hard_exit``: leave with ``os._exit`` (the executable); False raises SystemExit as ``sys.exit`` does, for a
    caller that runs the CLI inside its own process (``eagleconv.cli.main:main``)."""
    global _STDOUT_AT_START
    open_missing_std_streams()
    _STDOUT_AT_START = _identity(1)
    _exit(_run(), hard_exit)


def _exit(code: int | str | None, hard_exit: bool = True) -> None:
    """Flush and leave with ``code`` (sys.exit's meaning), without the interpreter's finalisation: it restores the
    default signal handlers, so a SIGTERM arriving while it runs killed a finished command (-15, not 143)."""
    if isinstance(code, str):
        _say_line(code)
    status = code if isinstance(code, int) else (0 if code is None else 1)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: quiet, exit 141 (README "Exit codes")
        status = status or STDOUT_CLOSED
    except OSError as exc:  # a full stdout: one line, exit 2
        status = _os_error(exc) if status == 0 else status
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr gone too: the exit status still says it
    if not hard_exit:
        sys.exit(status)
    os._exit(status)


def _say_line(text: str) -> None:
    """One line on stderr, before click may be imported; a stderr gone too leaves the exit status to say it."""
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _run() -> int | str | None:
    """The command's exit status; an Interrupted from anywhere (the moment the handlers are in, an import, click's
    parsing, a command) is one line."""
    try:
        raise_on_termination(sigint=True)  # inside the try: a signal the instant after it is installed is one line
        for stream in (sys.stdout, sys.stderr):  # a path that is not UTF-8 prints escaped, never fails the output
            try:
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
            except (AttributeError, ValueError):
                pass  # not a text stream (a test's replacement): it keeps its own policy
        try:
            from .commands import cli

            cli.main(prog_name="eagleconv")  # standalone: always ends in SystemExit
        except SystemExit as done:
            exit_on_termination()  # from here a signal exits 128+N at once: nothing is left to clean up
            return STDOUT_CLOSED if done.code == 1 and _reader_gone() else done.code
        except Interrupted as exc:
            exit_on_termination()
            return _interrupted(exc)
        except OSError as exc:  # outside run_command (--help, formats, findings): click re-raises all but EPIPE
            return _os_error(exc)
    except Interrupted as exc:  # a second signal, while the first was being handled
        exit_on_termination()
        return _interrupted(exc)
    except BaseException:  # the handler's Interrupted, come back through a native library as another exception
        signum = received_signal()  # (pydantic-core turns it into a PanicException while building a schema)
        if signum is None:
            raise
        exit_on_termination()
        return _interrupted(Interrupted(signum))
    return 0


def _identity(file: int | str) -> tuple[int, int] | None:
    """The (device, inode) of an open descriptor or a path (os.stat takes both); None when it cannot be read."""
    try:
        info = os.stat(file)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _reader_gone() -> bool:
    """Whether the exit 1 came from EPIPE on stdout, not from findings: click's main then wraps stdout in
    PacifyFlushWrapper, rich's Console.on_broken_pipe points fd 1 at /dev/null; both exit 1."""
    if type(sys.stdout).__name__.lstrip("_") == "PacifyFlushWrapper":  # by name: click 8.5 made the class private
        return True
    now = _identity(1)
    return now is not None and now != _STDOUT_AT_START and now == _identity(os.devnull)


def _os_error(exc: OSError) -> int:
    """A full stdout (``--help > /dev/full``) is app's one line and exit 2; anything else an internal error line."""
    from .app import _say, _stdout_lost, _stdout_unwritable

    if _stdout_unwritable(exc):
        _stdout_lost(exc)
    else:
        _say(f"eagleconv: internal error: {type(exc).__name__}: {exc}")
    return 2


def _interrupted(exc: Interrupted) -> int:
    _say_line(f"eagleconv: {exc}")
    return exc.exit_code
