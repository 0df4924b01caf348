"""``eagleconv.cli.main``: the CLI group (``cli``, assembled in ``commands``) and ``main`` for a caller that runs the
CLI inside its own process.  The installed executable is ``entry.main``, which sets up the process before any
of the commands' imports; ``main`` here goes through it too, apart from ending in SystemExit, not ``os._exit``.
"""

from __future__ import annotations

from .commands import FORMATS, cli, parse_size

__all__ = ["FORMATS", "cli", "main", "parse_size"]


def main() -> None:
    """The CLI for a caller in its own process (and scripts installed before ``entry.main``)."""
    from .entry import main as run

    run(hard_exit=False)


if __name__ == "__main__":
    main()
