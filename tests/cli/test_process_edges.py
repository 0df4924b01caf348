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

from tests.support.signals import default_signals

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}


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
        default_signals()
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
        if name == "eagleconv.cli.commands":
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
                             preexec_fn=default_signals)
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
            # nothing, or (a signal after the rename, while the report prints) the whole output: never a part
            assert not dst.exists() or sorted(outputs(dst)) == ["config.json", "model.safetensors"]
        else:
            assert sorted(outputs(dst)) == ["config.json", "model.safetensors"]
        assert debris(tmp_path) == []
    assert interrupted >= 1  # at 0 s the command cannot have finished: the run lands in its imports


def test_an_ignored_sighup_stays_ignored(drafter, tmp_path):
    """``nohup eagleconv ...``: the hangup is ignored as nohup asks, and the command completes."""
    src, dst, flag = drafter(producer="vllm"), tmp_path / "out", tmp_path / "flag"
    argv = [sys.executable, "-c", _FLAGGED_ENTRY, str(flag), "convert", str(src), str(dst), "--to", "vllm"]

    def nohup() -> None:
        default_signals()
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


# -- items 7 and 16: paths that are not UTF-8, hold a newline or begin with a dash --------------------------------

def run_bytes(*args: bytes | str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    argv = [os.fsencode(sys.executable), b"-m", b"eagleconv", *(os.fsencode(a) for a in args)]
    return subprocess.run(argv, env=ENV, capture_output=True, timeout=120, cwd=cwd, preexec_fn=default_signals)


def test_a_destination_that_is_not_utf8_is_reported_escaped_under_json(drafter, tmp_path):
    src = drafter(producer="vllm")
    dst = os.fsencode(tmp_path) + b"/out\xff"
    result = run_bytes("convert", src, dst, "--to", "vllm", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["destination"] == os.fsdecode(os.fsencode(tmp_path)) + "/out\\xff"
    assert sorted(os.listdir(dst)) == [b"config.json", b"model.safetensors"]
    human = run_bytes("inspect", dst)
    assert human.returncode == 0 and b"out\\xff" in human.stdout, human.stderr


def test_a_missing_path_that_is_not_utf8_is_one_json_object_and_one_line(tmp_path):
    result = run_bytes("inspect", os.fsencode(tmp_path) + b"/missing\xff", "--json")
    assert result.returncode == 2
    error = json.loads(result.stdout)
    assert error["ok"] is False and error["error"].endswith("/missing\\xff: no such file or directory")
    assert result.stderr.decode().count("\n") == 1 and b"Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["miss\ning", "esc\x1b[31mape", "tab\there"])
def test_an_error_naming_a_path_with_a_control_character_stays_one_line(tmp_path, name):
    result = run_bytes("inspect", tmp_path / name)
    assert result.returncode == 2
    line = result.stderr.decode()
    assert line.count("\n") == 1 and "\x1b" not in line and "\t" not in line, line
    assert repr(name)[1:-1] in line


def test_a_refusal_naming_a_destination_with_a_newline_is_one_line(drafter, tmp_path):
    src = drafter(producer="vllm")
    dst = tmp_path / "o\nut"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    result = run_bytes("convert", src, dst, "--to", "vllm", "--overwrite")
    assert result.returncode == 2
    assert result.stderr.decode().count("\n") == 1 and "o\\nut" in result.stderr.decode(), result.stderr
    assert sorted(p.name for p in dst.iterdir()) == ["keep.txt"]
    done = run_bytes("convert", src, tmp_path / "fresh\nname", "--to", "vllm")
    assert done.returncode == 0 and done.stdout.decode().splitlines()[0].count("fresh\\nname") == 1, done.stdout


def test_dash_leading_paths_after_a_double_dash(drafter, tmp_path):
    src = drafter(producer="vllm")
    os.rename(src, tmp_path / "-src")
    result = run_bytes("convert", "--to", "vllm", "--json", "--", "-src", "-out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["destination"] == "-out"
    assert sorted(p.name for p in (tmp_path / "-out").iterdir()) == ["config.json", "model.safetensors"]
    refused = run_bytes("inspect", "-src", cwd=tmp_path)  # without "--" it is an option: a usage error, exit 2
    assert refused.returncode == 2 and b"Traceback" not in refused.stderr


# -- item 12: stdout on a full device -----------------------------------------------------------------------------

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


@needs_dev_full
@pytest.mark.parametrize("as_json", [True, False])
def test_a_full_stdout_is_one_line_exit_2_and_the_destination_stays_whole(drafter, tmp_path, as_json):
    src, dst, clean = drafter(producer="vllm"), tmp_path / "out", tmp_path / "clean"
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "eagleconv", "convert", str(src), str(dst), "--to", "vllm",
                                 *(["--json"] if as_json else [])], stdout=full, stderr=subprocess.PIPE, text=True,
                                env=ENV, timeout=120, preexec_fn=default_signals)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("eagleconv: error: stdout: ") and "No space left" in result.stderr
    again = subprocess.run([sys.executable, "-m", "eagleconv", "convert", str(src), str(clean), "--to", "vllm"],
                           capture_output=True, env=ENV, timeout=120)
    assert again.returncode == 0
    assert outputs(dst) == outputs(clean)


@needs_dev_full
@pytest.mark.parametrize("args", [["formats", "--json"], ["--help"], ["findings"]])
def test_commands_outside_the_error_policy_with_a_full_stdout(args):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "eagleconv", *args], stdout=full, stderr=subprocess.PIPE,
                                text=True, env=ENV, timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("eagleconv: error: stdout: cannot be written (No space left on device)")


@needs_dev_full
def test_an_error_under_json_with_a_full_stdout_or_stderr(tmp_path):
    missing = tmp_path / "missing"
    with open("/dev/full", "w") as full:
        no_stdout = subprocess.run([sys.executable, "-m", "eagleconv", "inspect", str(missing), "--json"],
                                   stdout=full, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
        no_stderr = subprocess.run([sys.executable, "-m", "eagleconv", "inspect", str(missing), "--json"],
                                   stdout=subprocess.PIPE, stderr=full, text=True, env=ENV, timeout=120)
    assert no_stdout.returncode == 2 and no_stdout.stderr == f"eagleconv: error: {missing}: no such file or directory\n"
    assert no_stderr.returncode == 2 and json.loads(no_stderr.stdout)["exit_code"] == 2


@pytest.mark.parametrize("hard_exit", [True, False])
def test_the_executable_leaves_without_the_interpreters_finalisation(hard_exit):
    """Finalisation restores the default signal handlers, so a SIGTERM arriving then killed a finished command
    (-15, seen at the floors): the executable flushes and leaves with os._exit; ``eagleconv.cli.main:main``, which
    a caller runs inside its own process, still ends in SystemExit (its atexit handlers run)."""
    script = ("import atexit, sys\n"
              "atexit.register(lambda: print('finalised', file=sys.stderr))\n"
              "sys.argv = ['eagleconv', 'formats', '--json']\n"
              "from eagleconv.cli import entry\n"
              f"entry.main(hard_exit={hard_exit})\n")
    result = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)  # flushed before leaving
    assert ("finalised" in result.stderr) is (not hard_exit), result.stderr


# A signal whose handler runs inside a weakref callback (as the import lock's cleanup callback did in CI): Python
# prints "Exception ignored" for the Interrupted and goes on; eagleconv sends the signal again to ordinary code.
_IN_A_CALLBACK = """
import gc, signal, sys, time, weakref
from eagleconv.support._process import raise_on_termination
from eagleconv.errors import Interrupted
raise_on_termination(sigint=True)
class Thing: pass
def callback(ref):
    signal.raise_signal(signal.SIG{name})
    len("the handler runs at this call, inside the callback")
thing = Thing()
ref = weakref.ref(thing, callback)
try:
    del thing
    for _ in range(200):
        time.sleep(0.01)
    print("never interrupted")
except Interrupted as exc:
    print("interrupted", exc.signum)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_inside_a_weakref_callback_is_sent_again(sig):
    script = _IN_A_CALLBACK.replace("{name}", signal.Signals(sig).name[3:])
    result = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=60,
                            preexec_fn=default_signals)
    assert result.stdout == f"interrupted {int(sig)}\n", (result.stdout, result.stderr)
    assert result.stderr == ""
