"""Interrupted conversions clean up: a signal mid-write keeps the previous output, and the next run removes the
staging of dead owners only and restores an interrupted non-atomic --overwrite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagleconv import convert
from eagleconv.errors import UsageError
from tests.conftest import read_json
from tests.support.files import debris
from tests.support.signals import default_signals

REPO = Path(__file__).resolve().parents[2]


# Runs the CLI in a child whose writer parks inside the staging directory (after the first shard is
# copied) and says so, so the test can signal it at a known moment.  The flag file lists the threads (other
# than the main one) that do not block SIGINT/SIGTERM/SIGHUP: Linux may hand the signal to any such thread,
# and then the main thread's sleep (standing in for a long fsync) is not interrupted.
_PARKED_CHILD = """
import os, signal, sys, threading, time
from pathlib import Path
from eagleconv.io import writer
from eagleconv.cli.main import main
flag = Path(sys.argv[1])
real = writer.CheckpointWriter._write_shard
def unblocked_threads():
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    names = {t.native_id: t.name for t in threading.enumerate()}
    found = []
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == os.getpid():
            continue
        status = Path(f"/proc/self/task/{tid}/status").read_text()
        blocked = int(next(l for l in status.splitlines() if l.startswith("SigBlk:")).split()[1], 16)
        if blocked & wanted != wanted:
            found.append(names.get(int(tid), tid))
    return found
def parked(*args, **kwargs):
    real(*args, **kwargs)
    flag.write_text(" ".join(map(str, unblocked_threads())) or "-")
    time.sleep(60)
writer.CheckpointWriter._write_shard = staticmethod(parked)
sys.argv = ["eagleconv"] + sys.argv[2:]
main()
"""


def _interrupt_parked_writer(args: list[str], flag: Path, sig: int) -> subprocess.CompletedProcess:
    """Run ``eagleconv ARGS`` in a child parked after its writer's first shard, send it ``sig`` there (checking the
    staging directory exists and no helper thread can take the signal) and wait for it to exit."""
    argv = [sys.executable, "-c", _PARKED_CHILD, str(flag), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=default_signals)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    while not flag.read_text():  # created, not yet written
        time.sleep(0.01)
    assert flag.read_text() == "-", f"helper threads that can take the signal: {flag.read_text()}"
    assert any(name.endswith(".partial") for name in debris(flag.parent))
    child.send_signal(sig)
    out, err = child.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


# Every command that writes through CheckpointWriter: (source recipe, arguments after SRC DST), each output split
# into 4 KB shards so the child is parked with shards still to write.
WRITERS = {
    "convert": (dict(producer="specforge"), ["--to", "vllm"]),
    "upgrade": (dict(producer="vllm"), []),
    "downgrade": (dict(producer="vllm", eagle31=True), ["--allow-lossy"]),
}


@pytest.mark.parametrize("command", sorted(WRITERS))
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_signal_while_writing_cleans_up_and_keeps_the_previous_output(drafter, tmp_path, command, sig, code,
                                                                      overwrite):
    recipe, extra = WRITERS[command]
    src = drafter(**recipe)
    dst = tmp_path / "out"
    previous = None
    if overwrite:
        convert(drafter(producer="torchspec"), dst, "vllm")
        previous = {p.name: p.read_bytes() for p in dst.iterdir()}
    args = [command, str(src), str(dst), *extra, "--max-shard-size", "4KB"] + (["--overwrite"] if overwrite else [])
    result = _interrupt_parked_writer(args, tmp_path / "parked", sig)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.strip().startswith("eagleconv: interrupted")
    assert debris(tmp_path) == []
    if previous is None:
        assert not dst.exists()
    else:
        assert {p.name: p.read_bytes() for p in dst.iterdir()} == previous


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_next_run_removes_staging_of_dead_owners_only(drafter, tmp_path):
    from eagleconv.io.debris import _host_tag, process_start

    src = drafter(producer="specforge")
    dst = tmp_path / "out"
    convert(drafter(producer="torchspec"), dst, "vllm")  # present: a dead .old is debris, not a lost output
    host = _host_tag()
    me, my_start = os.getpid(), process_start(os.getpid())
    names = {
        "dead": f".out.eagleconv-{host}-{_dead_pid()}-123-aaaa0001.partial",
        "reused pid": f".out.eagleconv-{host}-{me}-{int(my_start) + 1}-aaaa0002.partial",  # my pid, another start
        "dead old": f".out.eagleconv-{host}-{_dead_pid()}-123-aaaa0003.old",
        "live": f".out.eagleconv-{host}-{me}-{my_start}-aaaa0004.partial",
        "other host": f".out.eagleconv-{'0' * 8 if host != '0' * 8 else '1' * 8}-{_dead_pid()}-1-aaaa0005.partial",
        "legacy": ".out.eagleconv-0123abcd.partial",
        "other destination": f".other.eagleconv-{host}-{_dead_pid()}-123-aaaa0006.partial",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"half")
    report = convert(src, dst, "vllm", overwrite=True)
    left = set(debris(tmp_path))
    # a dead owner's debris goes whatever destination it was for (issue 18: a retry under another name)
    for kind in ("dead", "reused pid", "dead old", "other destination"):
        assert names[kind] not in left, kind
    for kind in ("live", "other host", "legacy"):
        assert names[kind] in left, kind
    assert sum("no longer running" in n for n in report.notes) == 4
    assert any(names["legacy"] in n and "left" in n for n in report.notes)


def test_interrupted_non_atomic_overwrite_is_restored_by_the_next_run(drafter, tmp_path, monkeypatch):
    """Where RENAME_EXCHANGE is missing the old output is set aside first: a kill between the two renames
    leaves the destination absent, and the next run puts the previous output back before anything else."""
    from eagleconv.io import staging
    from eagleconv.io.debris import _host_tag

    dst = tmp_path / "out"
    convert(drafter(producer="torchspec"), dst, "vllm")
    previous = {p.name: p.read_bytes() for p in dst.iterdir()}
    aside = tmp_path / f".out.eagleconv-{_host_tag()}-{_dead_pid()}-99-abcd0001.old"
    os.rename(dst, aside)  # the state a SIGKILL between the renames leaves
    (tmp_path / f".out.eagleconv-{_host_tag()}-{_dead_pid()}-99-abcd0002.partial").mkdir()
    src = drafter(producer="specforge")
    with pytest.raises(UsageError, match="already exists"):
        convert(src, dst, "vllm")  # no --overwrite: the restored output is not replaced
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == previous
    assert debris(tmp_path) == []
    # and the fallback itself: a failure of the second rename puts the old output back at once
    monkeypatch.setattr(staging, "exchange", lambda a, b: False)
    real_rename = os.rename

    def failing(a, b):
        if Path(a).name.endswith(".partial"):
            raise OSError("simulated failure publishing")
        return real_rename(a, b)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="simulated"):
        convert(src, dst, "vllm", overwrite=True)
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == previous
    assert debris(tmp_path) == []
    monkeypatch.setattr(os, "rename", real_rename)
    convert(src, dst, "vllm", overwrite=True)  # the fallback path publishes
    assert read_json(dst / "config.json")["eagleconv"]["converted_from"] == "specforge"
    assert debris(tmp_path) == []


