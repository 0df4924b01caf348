"""A closed stdout (``| head``) ends quietly: no traceback, the exit code and stderr line still arrive.

The reader going away exits 141 (128 + SIGPIPE, as the shell reports a process SIGPIPE killed), not 1, which
means error findings (issue 35 item 9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EAGLE3 = ROOT / "fixtures" / "tiny-pair" / "eagle3"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, env=ENV,
                          timeout=600, **kwargs)


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Run the CLI with stdout a pipe whose reading end is already closed: every write gets EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "eagleconv", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=ENV, timeout=600)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [("findings",), ("findings", "--json"), ("inspect", str(EAGLE3), "--json"),
                                  ("inspect", str(EAGLE3)), ("validate", str(EAGLE3), "--json"), ("formats",),
                                  ("--help",)])
def test_a_closed_stdout_ends_quietly_with_exit_141(args):
    result = run_into_closed_pipe(*args)
    assert result.stderr == ""  # no 'internal error', no traceback, no 'Exception ignored'
    assert result.returncode == 141


def test_a_json_failure_into_a_closed_stdout_keeps_its_stderr_line_and_exit_code(tmp_path):
    """The error object cannot reach stdout; the one line on stderr and exit 2 still do (before: exit 1, silent)."""
    result = run_into_closed_pipe("inspect", str(tmp_path / "absent"), "--json")
    assert result.returncode == 2
    assert result.stderr == f"eagleconv: error: {tmp_path / 'absent'}: no such file or directory\n"


def test_head_through_bash_gets_its_line_and_nothing_on_stderr():
    script = f'"{sys.executable}" -m eagleconv findings --json | head -c 10; exit "${{PIPESTATUS[0]}}"'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=ENV, timeout=600)
    assert result.stdout == cli("findings", "--json").stdout[:10]
    assert result.stderr == "" and result.returncode in (0, 141)


def test_an_open_stdout_still_gets_the_whole_output():
    result = cli("findings")
    assert result.returncode == 0 and "EC043" in result.stdout and result.stderr == ""


def test_findings_into_dev_null_still_exit_1():
    """141 is only the reader going away: stdout sent to /dev/null from the start keeps findings' exit 1."""
    pair = ROOT / "fixtures" / "tiny-pair"
    with open(os.devnull, "w") as devnull:
        result = subprocess.run([sys.executable, "-m", "eagleconv", "validate", str(pair / "eagle31"), "--engine",
                                 "llama.cpp", "--no-numeric"], stdout=devnull, stderr=subprocess.PIPE, text=True,
                                env=ENV, timeout=600)
    assert result.returncode == 1, result.stderr
