"""Signals and helper threads: SIGTERM/SIGHUP unwind like SIGINT, and threads eagleconv starts never take them;
and how many compute threads a CPU forward should start on a machine others may be using.

Kept apart from ``errors`` (which holds only exceptions): these change process state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import Interrupted

if TYPE_CHECKING:
    import threading


def raise_on_termination(sigint: bool = False) -> None:
    """Make SIGTERM and SIGHUP raise Interrupted in the main thread (so clean-up runs), as SIGINT raises KeyboardInterrupt.

    ``sigint``: SIGINT raises Interrupted too (the CLI's choice): click turns a KeyboardInterrupt that reaches
    it into "Aborted!" and exit 1, and the CLI's entry point reports every Interrupted as one line, exit 128+N.
    A signal the process was started ignoring stays ignored (``nohup`` ignores SIGHUP, a shell's background job
    SIGINT), as Python itself leaves an ignored SIGINT alone.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: object) -> None:
        global _received
        _received = signum
        if _deferring:  # inside the unraisable hook, where an exception is lost too: the re-sender sends it
            return
        raise Interrupted(signum)

    for name in ("SIGINT", "SIGTERM", "SIGHUP") if sigint else ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) != signal.SIG_IGN:
            signal.signal(getattr(signal, name), handler)
    _redeliver_when_ignored()


_received: int | None = None
_deferring = False  # an Interrupted was lost: signals wait for the re-sender (_send_again), which clears this


def _redeliver_when_ignored() -> None:
    """An Interrupted raised where Python cannot propagate it (a weakref callback such as the import lock's, a
    ``__del__``, a GC callback) is printed as "Exception ignored ... Traceback" and the work goes on: send the
    signal to the main thread again, from a helper thread, once the main thread has left the hook.

    Not from the hook itself, nor while the main thread is still in it: the handler would run there (at its next
    call), where its exception is lost as well.  Until then the handler only records the signal.
    """
    import sys

    previous = sys.unraisablehook
    if getattr(previous, "_eagleconv", False):
        return

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        global _deferring
        if isinstance(unraisable.exc_value, Interrupted):
            _deferring = True
            _send_again(unraisable.exc_value.signum, hook.__code__)
        else:
            previous(unraisable)

    hook._eagleconv = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


RESEND_POLL = 0.002  # seconds between the re-sender's looks at the main thread's stack


def _send_again(signum: int, hook_code: object) -> None:
    """Start the re-sender: it waits until no frame of the hook is on the main thread's stack (the hook only
    returns, and nothing re-enters it before a signal is sent again), then sends the last signal received."""
    import signal
    import sys
    import threading
    import time

    main = threading.main_thread().ident

    def in_hook() -> bool:
        frame = sys._current_frames().get(main) if main is not None else None
        while frame is not None:
            if frame.f_code is hook_code:
                return True
            frame = frame.f_back
        return False

    def later() -> None:
        global _deferring
        while in_hook():
            time.sleep(RESEND_POLL)
        _deferring = False
        if main is not None:  # the main thread: a signal there interrupts its system call
            signal.pthread_kill(main, _received if _received is not None else signum)

    start_helper_thread(later, name="eagleconv-signal-again")


def received_signal() -> int | None:
    """The last signal raise_on_termination's handler turned into Interrupted, or None: code that runs the handler
    inside a native library (pydantic-core building a schema) may see it come back as another exception."""
    return _received


def exit_on_termination() -> None:
    """From now on SIGINT/SIGTERM/SIGHUP end the process at once with 128+N: for the CLI's last steps (its error
    line printed, the interpreter shutting down), where an exception would only become a traceback."""
    import os
    import signal

    def handler(signum: int, frame: object) -> None:
        os._exit(128 + signum)

    for name in TERMINATION_SIGNALS:
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) != signal.SIG_IGN:
            signal.signal(getattr(signal, name), handler)


def open_missing_std_streams() -> None:
    """Give a closed stdin, stdout or stderr (``<&-``, ``>&-``, ``2>&-``) /dev/null, before anything opens a file.

    Otherwise the first file the process opens takes descriptor 0, 1 or 2, and a message meant for stderr is
    written into it (an output shard), or Python left ``sys.stderr`` None and the first message raises.
    """
    import os
    import sys

    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False,  # noqa: SIM115 - the process's own
                                    errors="backslashreplace" if fd == 2 else "strict"))


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


# --- how many compute threads: the cores this process may use that other processes leave idle -------------------
#
# OpenMP's team needs every thread at each of a decode step's thousands of ~0.1 ms products: one thread whose
# core another process holds stalls all of them, and the others spin waiting.  On a 2-core machine with two
# CPU-bound processes beside it, simulate with 2 threads ran 10x slower than with 1 (issue 27); on an idle one,
# 1 thread is ~1.2x slower than 2.  So a core counts only when others leave most of it idle (FREE_CORE_MARGIN).

FREE_CORE_MARGIN = 0.3  # a core is ours when others use less than 30% of it: floor(idle cores + this)
MIN_SAMPLE_SECONDS = 0.2  # the shortest window others' CPU use is measured over (USER_HZ ticks are 10 ms)


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (containers, ``taskset``), else every CPU."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def choose_threads(cores: int, others_busy: float | None) -> int:
    """Threads for ``cores`` usable cores when other processes keep ``others_busy`` cores' worth busy (None: unknown).

    floor(idle cores + FREE_CORE_MARGIN), at least 1: a thread on a core that is mostly someone else's costs
    far more (every product waits for it) than leaving a core's spare 30% unused.
    """
    if others_busy is None:
        return max(1, cores)
    free = cores - max(0.0, others_busy)
    return max(1, min(cores, int(free + FREE_CORE_MARGIN)))


def cpu_sample() -> tuple[float, float, float] | None:
    """(monotonic time, busy CPU seconds of every process on this process's cores, this process's CPU seconds).

    None where /proc/stat cannot be read (not Linux): the thread choice then uses every core.
    """
    import os
    import time

    try:
        cores = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and not line.startswith("cpu ")]
        hz = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait (steal: the host's)
    busy = sum(sum(int(v) for i, v in enumerate(f[1:9]) if i not in (3, 4)) for f in lines if f[0] in cores)
    own = os.times()
    return time.monotonic(), busy / hz, own.user + own.system


def others_busy(start: tuple[float, float, float] | None, end: tuple[float, float, float] | None) -> float | None:
    """Cores' worth of CPU that processes other than this one used between two samples (None: unknown)."""
    if start is None or end is None or end[0] - start[0] <= 0:
        return None
    return max(0.0, (end[1] - start[1]) - (end[2] - start[2])) / (end[0] - start[0])


def default_threads(since: tuple[float, float, float] | None = None) -> tuple[int, float | None]:
    """The compute threads to start now (:func:`choose_threads`), and the cores' worth others used since ``since``.

    ``since``: a :func:`cpu_sample` taken earlier (simulate takes one before torch loads, so the import is the
    window); without one, or one too recent, it waits until MIN_SAMPLE_SECONDS have passed.
    """
    import time

    start = since or cpu_sample()
    if start is not None:
        time.sleep(max(0.0, MIN_SAMPLE_SECONDS - (time.monotonic() - start[0])))
    others = others_busy(start, cpu_sample())
    return choose_threads(usable_cores(), others), others
