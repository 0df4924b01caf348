"""Exception hierarchy.  Every error names the file it is about and maps to a CLI exit code.

Exit codes (documented in the README): 0 success, 1 error-severity findings,
2 bad usage or unreadable/unsafe input.
"""

from __future__ import annotations

from pathlib import Path

from ._text import printable

# Input problems the findings reference treats as findings, not as unreadable input: exit 1 from every command.
FINDING_CODES = frozenset({"EC001", "EC002"})


class EagleconvError(Exception):
    """Base class.  ``exit_code`` is what the CLI returns for it."""

    exit_code = 2

    def __init__(self, message: str, path: str | Path | None = None, code: str | None = None):
        self.message = message
        self.path = str(path) if path is not None else None
        self.code = code
        if code in FINDING_CODES:
            self.exit_code = 1
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """The message on one printable line: a path's newline, control character or non-UTF-8 byte is escaped."""
        where = f"{self.path}: " if self.path else ""
        code = f"[{self.code}] " if self.code and f"[{self.code}]" not in self.message else ""
        return printable(f"{where}{code}{self.message}")


class UnsafeInputError(EagleconvError):
    """Input that is malformed, hostile or refused by policy (pickle, path traversal...)."""


class FormatError(EagleconvError):
    """Input that is well-formed but is not a drafter layout eagleconv understands."""


class AmbiguousLayoutError(FormatError):
    """Two or more layouts fit the checkpoint equally well; ``--from`` (``from_format=``) must choose."""

    def __init__(self, message: str, path: str | Path | None = None, candidates: list[str] | None = None):
        self.candidates = list(candidates or [])
        super().__init__(message, path)


class UsageError(EagleconvError):
    """Bad arguments: unknown format, destination inside the source, and the like."""


class ArgumentTypeError(UsageError, TypeError):
    """A library argument of the wrong type (a path that is None or an int, engines=None...).

    Also a TypeError, so a caller's ``except TypeError`` still catches it; the message names the argument.
    """

    @classmethod
    def require_path(cls, value: object, argument: str) -> None:
        """Raise unless ``value`` is a str or an ``os.PathLike`` (what every path argument accepts)."""
        import os

        if not isinstance(value, str | os.PathLike):
            raise cls(f"{argument} must be a str or os.PathLike, not {type(value).__name__} ({value!r:.80})")


class DestinationError(EagleconvError, OSError):
    """The destination could not be written (no space, read-only, busy, permission): exit 2, nothing written.

    Also an OSError carrying the failed call's ``errno``, so a library caller's
    ``except OSError`` keeps working; the message names the destination, never a staging path.
    """

    def __init__(self, message: str, path: str | Path | None = None, errno: int | None = None):
        super().__init__(message, path)
        self.errno = errno
        self.filename = self.path

    def __str__(self) -> str:
        return self.one_line()


class MissingExtraError(EagleconvError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it (eagleconv.support._extras)."""

    def __init__(self, message: str, module: str, extra: str, path: str | Path | None = None):
        self.extra = extra
        super().__init__(message, path)
        self.name = module  # ImportError's attributes: the missing module, and the file that needed it
        self.path = str(path) if path is not None else None  # (ImportError.__init__ reset it)


class FindingsError(EagleconvError):
    """The input is readable but inconsistent (a shape field missing, an unmapped tensor...).

    These are findings about the checkpoint, so the exit code is 1.
    """

    exit_code = 1


class ConversionError(FindingsError):
    """The conversion cannot be done exactly (unmapped tensor, missing lm_head, refused source...)."""


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived (the CLI turns them into this, as Python turns SIGINT into KeyboardInterrupt).

    A BaseException, so no ``except Exception`` swallows it: it unwinds like
    KeyboardInterrupt, and the writer's clean-up removes its staging directory.
    The CLI exits 128 + the signal number, as a shell reports a killed command.
    """

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
