"""Run ``python -m eagleconv`` as a user does: through real pipes, or on a pseudo-terminal of a given width."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def piped(*args: str) -> subprocess.CompletedProcess[str]:
    """``eagleconv ARGS`` with stdout and stderr real pipes, COLUMNS unset (the plain layout: issue 27 item 4;
    with COLUMNS set, tables fold at that width, see tests/cli/test_output_width.py)."""
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True,
                          env=_env(), timeout=300)


def on_terminal(*args: str, columns: int, stdout_file: Path | None = None) -> tuple[int, str]:
    """``eagleconv ARGS`` on a pseudo-terminal ``columns`` wide (stdout to ``stdout_file`` if given); the
    terminal's bytes, ANSI escapes removed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    out = open(stdout_file, "wb") if stdout_file else slave  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "eagleconv", *args], stdin=slave, stdout=out, stderr=slave,
                            env=_env(TERM="xterm"), close_fds=True)
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        data += chunk
    code = proc.wait(timeout=300)
    os.close(master)
    if stdout_file:
        out.close()
    return code, ANSI.sub("", data.decode("utf-8", "replace"))
