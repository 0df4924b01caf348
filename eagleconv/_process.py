"""Signals and helper threads: SIGTERM/SIGHUP unwind like SIGINT, and threads eagleconv starts never take them.

Kept apart from ``errors`` (which holds only exceptions): these change process state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import Interrupted

if TYPE_CHECKING:
    import threading


def raise_on_termination() -> None:
    """Make SIGTERM and SIGHUP raise Interrupted in the main thread (so clean-up runs), as SIGINT raises KeyboardInterrupt."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), handler)


TERMINATION_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class termination_signals_blocked:
    """Block SIGINT/SIGTERM/SIGHUP in the calling thread; any that arrive meanwhile are delivered on exit.

    Used around the writer's few publishing renames, and around starting helper
    threads (a new thread inherits the mask): see ``start_helper_thread``.
    """

    def __enter__(self) -> None:
        import signal

        mask = {getattr(signal, n) for n in TERMINATION_SIGNALS if hasattr(signal, n)}
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, mask) if hasattr(signal, "pthread_sigmask") else None

    def __exit__(self, *exc: object) -> None:
        import signal

        if self.previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


def start_helper_thread(target: Callable[..., object], *args: object, name: str) -> threading.Thread:
    """Start a daemon thread that never receives SIGINT/SIGTERM/SIGHUP.

    Linux hands a process-directed signal to any thread that does not block it.
    Python runs the handler in the main thread either way, but only a signal the
    kernel delivered to the main thread interrupts the system call it is blocked
    in: one that lands on a helper leaves Ctrl-C waiting until that call returns
    (an fsync of a large shard, a long sleep).  Threads started here block them,
    so the main thread always gets them.
    """
    import threading

    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    with termination_signals_blocked():
        thread.start()
    return thread


def start_worker_pools() -> None:
    """Start numpy's (OpenBLAS) and torch's (OpenMP) worker threads now, with SIGINT/SIGTERM/SIGHUP blocked.

    Both start their threads lazily, from the thread that first needs them, and a thread inherits its creator's
    signal mask: started from the main thread mid-computation they can take Ctrl-C, which then does not
    interrupt the main thread's fsync (see :func:`start_helper_thread`).  For commands that compute with torch
    in the main thread and then write (upgrade, downgrade); a no-op for pools already running.
    """
    with termination_signals_blocked():
        import numpy  # noqa: F401  (OpenBLAS starts its threads at import)
        import torch

        n = torch.get_num_threads()
        if n > 1:  # a reduction above the intra-op grain (32768) on every thread starts the full OpenMP team
            torch.ones(n * 65536).sum()
