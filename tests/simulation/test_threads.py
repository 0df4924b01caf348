"""simulate's default threads on a shared machine, and --threads' bounds (issue 27 item 1, issue 28 item 11).

The default is the cores other processes leave idle (eagleconv.support._process.choose_threads over cpu_sample):
these tests check the decision and the measurement it is given, not timings (benchmarks/simulate_threads.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagleconv.support._process import (FREE_CORE_MARGIN, choose_threads, cpu_sample, default_threads, others_busy,
                                usable_cores)

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.mark.parametrize("cores,others,expected", [
    (2, 0.0, 2),     # idle: every core
    (2, 0.05, 2),    # idle but for a few ticks of housekeeping
    (2, 1.0, 1),     # one CPU-bound process beside it
    (2, 2.0, 1),     # two (issue 27: 10x slower with 2 threads than with 1)
    (2, 7.0, 1),     # load far above the cores: still one thread
    (2, 0.5, 1),     # half a core busy: the second thread would wait for it
    (16, 2.0, 14),
    (16, 0.2, 16),
    (1, 0.0, 1),
    (4, None, 4),    # unknown (no /proc/stat): every core, as before
])
def test_threads_are_the_cores_others_leave_idle(cores, others, expected):
    assert choose_threads(cores, others) == expected


def test_a_core_counts_only_when_others_leave_most_of_it():
    # just below and above the margin: 2 threads only while others use less than FREE_CORE_MARGIN of a core
    assert choose_threads(2, FREE_CORE_MARGIN - 0.01) == 2
    assert choose_threads(2, FREE_CORE_MARGIN + 0.01) == 1
    assert all(1 <= choose_threads(c, o / 4) <= c for c in (1, 2, 3, 8) for o in range(0, 40))


def test_others_busy_subtracts_this_process():
    # 2 s apart: the machine's cores were busy for 3 CPU-seconds, 1 of them this process's own
    assert others_busy((10.0, 100.0, 5.0), (12.0, 103.0, 6.0)) == pytest.approx(1.0)
    assert others_busy((10.0, 100.0, 5.0), (12.0, 100.5, 6.0)) == 0.0  # tick rounding: never negative
    assert others_busy(None, (12.0, 100.0, 5.0)) is None and others_busy((1.0, 0, 0), (1.0, 0, 0)) is None


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc/stat")
def test_a_spinning_process_beside_it_takes_a_thread_away():
    """A real CPU-bound process started beside it: measured as (at least most of) a busy core."""
    burner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 30\n"
                               "while time.monotonic() < end: pass\n"])
    try:
        time.sleep(0.5)  # the interpreter has started and spins
        threads, others = default_threads(cpu_sample())
        assert others is not None and others >= 0.7, others
        assert threads == choose_threads(usable_cores(), others) and threads <= max(1, usable_cores() - 1)
    finally:
        burner.kill()
        burner.wait()


@pytest.mark.parametrize("threads", [str(usable_cores() + 1), "20000", "100000"])
def test_threads_above_the_cpus_are_one_line_and_exit_2(threads, tmp_path):
    """--threads 20000 made libgomp fail thread creation (exit 1), 100000 segfaulted (issue 28, item 11)."""
    done = subprocess.run([sys.executable, "-m", "eagleconv", "simulate", str(PAIR / "eagle3"), "--target",
                           str(PAIR / "target"), "--max-tokens", "2", "--threads", threads],
                          capture_output=True, text=True, env=ENV, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--threads {threads}" in lines[0] and f"1 to {usable_cores()}" in lines[0], lines
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def test_help_says_what_threads_does_and_its_default():
    done = subprocess.run([sys.executable, "-m", "eagleconv", "simulate", "--help"], capture_output=True, text=True,
                          env={**ENV, "COLUMNS": "200"}, timeout=120)
    text = " ".join(done.stdout.split())
    assert "--threads N" in text and f"({usable_cores()} here)" in text and "Default: the cores other processes leave idle" in text
