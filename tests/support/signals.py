"""Signal dispositions for the children the signal tests start."""

from __future__ import annotations

import signal


def default_signals() -> None:
    """In the child (``preexec_fn``): SIGINT/SIGTERM/SIGHUP as a terminal would deliver them.

    A test runner started in the background (``cmd &``) ignores SIGINT and one under ``nohup`` ignores SIGHUP;
    a child inherits that, and eagleconv rightly keeps an ignored signal ignored, so a test that sends one would
    wait for a process that never reacts.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
