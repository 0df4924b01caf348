"""Issue 28, the process's edges: closed standard streams, signals from start-up on, paths that are not UTF-8 or
hold a newline, a full stdout.  Each runs the real executable in a child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}


def _default_signals() -> None:
    """In the child: SIGINT/SIGHUP as a terminal would deliver them (a background test runner may ignore them)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def outputs(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def debris(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".eagleconv-" in p.name)


# -- item 5: a closed stdin, stdout or stderr --------------------------------------------------------------------

@pytest.mark.parametrize("closed", [0, 1, 2])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_standard_stream_breaks_nothing(drafter, tmp_path, closed, as_json):
    src, dst = drafter(producer="vllm"), tmp_path / "out"

    def close_it() -> None:
        _default_signals()
        os.close(closed)

    keep = {0: {}, 1: {"stderr": subprocess.PIPE}, 2: {"stdout": subprocess.PIPE}}[closed]
    result = subprocess.run([sys.executable, "-m", "eagleconv", "convert", str(src), str(dst), "--to", "vllm",
                             *(["--json"] if as_json else [])], preexec_fn=close_it, env=ENV, text=True,
                            timeout=120, **({"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} | keep
                                            if closed == 0 else keep))
    streams = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, streams
    assert "internal error" not in streams and "Traceback" not in streams
    assert sorted(outputs(dst)) == ["config.json", "model.safetensors"]
    assert json.loads((dst / "config.json").read_text())["eagleconv"]["layout"] == "vllm"
    if as_json and closed != 1:
        assert json.loads(result.stdout)["ok"] is True


# -- item 6: a signal at any moment from start-up ----------------------------------------------------------------

# The real entry point, with one change: once it has installed its handlers it says so in a flag file, so the
# test can signal it at measured moments after that (during the imports of click, pydantic and the converter,
# click's parsing, the conversion, the report).
_FLAGGED_ENTRY = """
import sys
from pathlib import Path
from eagleconv.cli import entry
flag = Path(sys.argv[1])
install = entry.raise_on_termination
def flagged(**kwargs):
    install(**kwargs)
    flag.write_text("installed")
entry.raise_on_termination = flagged
sys.argv = ["eagleconv"] + sys.argv[2:]
entry.main()
"""

# The entry point, with the import of the CLI's command module held for 60 s: a signal then lands in an import.
_HELD_IMPORT = """
import sys, time
from pathlib import Path
import importlib.abc
flag = Path(sys.argv[1])
class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "eagleconv.cli.main":
            flag.write_text("importing")
            time.sleep(60)
        return None
sys.meta_path.insert(0, Hold())
from eagleconv.cli import entry
sys.argv = ["eagleconv"] + sys.argv[2:]
entry.main()
"""

CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


def _signal_child(script: str, flag: Path, args: list[str], sig: int, delay: float) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", script, str(flag), *args]
    child = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_default_signals)
    deadline = time.monotonic() + 60
    while not (flag.exists() and flag.read_text()):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never got to its flag"
        time.sleep(0.002)
    time.sleep(delay)
    child.send_signal(sig)
    out, err = child.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_an_import_is_one_line_and_128_plus_n(drafter, tmp_path, sig):
    src = drafter(producer="vllm")
    result = _signal_child(_HELD_IMPORT, tmp_path / "flag", ["convert", str(src), str(tmp_path / "out"), "--to",
                                                               "vllm"], sig, 0.0)
    assert result.returncode == CODES[sig], result.stderr
    assert result.stderr == f"eagleconv: interrupted by {signal.Signals(sig).name}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_at_any_moment_from_start_up(drafter, tmp_path, sig):
    """Signals sent 0 to 0.6 s after the handlers are installed: each run ends interrupted (one line, 128+N,
    nothing written, no staging left) or, when the signal came after the work, complete (exit 0, the output
    whole); never exit 1, a traceback or click's "Aborted!"."""
    src = drafter(producer="vllm")
    interrupted = 0
    for i, delay in enumerate((0.0, 0.02, 0.08, 0.2, 0.6)):
        dst, flag = tmp_path / f"out{i}", tmp_path / f"flag{i}"
        result = _signal_child(_FLAGGED_ENTRY, flag, ["convert", str(src), str(dst), "--to", "vllm"], sig, delay)
        assert result.returncode in (0, CODES[sig]), (delay, result.returncode, result.stderr)
        assert "Traceback" not in result.stderr and "Aborted" not in result.stderr, result.stderr
        if result.returncode:
            interrupted += 1
            assert result.stderr.endswith(f"eagleconv: interrupted by {signal.Signals(sig).name}\n"), result.stderr
            assert not dst.exists()
        else:
            assert sorted(outputs(dst)) == ["config.json", "model.safetensors"]
        assert debris(tmp_path) == []
    assert interrupted >= 1  # at 0 s the command cannot have finished: the run lands in its imports


def test_an_ignored_sighup_stays_ignored(drafter, tmp_path):
    """``nohup eagleconv ...``: the hangup is ignored as nohup asks, and the command completes."""
    src, dst, flag = drafter(producer="vllm"), tmp_path / "out", tmp_path / "flag"
    argv = [sys.executable, "-c", _FLAGGED_ENTRY, str(flag), "convert", str(src), str(dst), "--to", "vllm"]

    def nohup() -> None:
        _default_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    child = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=nohup)
    while not (flag.exists() and flag.read_text()):
        assert child.poll() is None, child.communicate()
        time.sleep(0.002)
    child.send_signal(signal.SIGHUP)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert sorted(outputs(dst)) == ["config.json", "model.safetensors"]
