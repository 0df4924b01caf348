"""Hub staging through io.staging.StagedDirectory (issue 18), and progress for push and pull (issue 17 item 8).

Real failures only: a full 16 KiB tmpfs (mounting needs root; skipped where not permitted) under pull's
destination and push's --stage-dir.  Progress is read from real ``python -m eagleconv`` processes on a
pseudo-terminal, and through real pipes, against tests/support/fake_hub.py (a real HTTP server on 127.0.0.1).
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

import eagleconv
from eagleconv.errors import DestinationError
from eagleconv.hub import MANIFEST, STEPS
from tests.support.hub import good, hub, run  # noqa: F401 - the loopback Hub fixture
from tests.support.terminal import on_terminal, piped
from tests.support.writes import assert_one_line_about, mounted_tmpfs


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A fresh huggingface_hub cache (off the small disk), for this process and its children."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def published(hub, drafter, repo: str = "org/a") -> Path:
    src = good(drafter)
    result = run("push", src, repo, "--no-forward")
    assert result.exit_code == 0, result.output
    return src


# -- one mechanism: a copy-time OSError is one DestinationError naming the destination (exit 2) --------------

def test_pull_into_a_full_disk_is_one_line_naming_the_destination(hub, drafter, cache, tmp_path):
    published(hub, drafter)
    with mounted_tmpfs(tmp_path / "small", "size=16k") as disk:
        dest = disk / "p"
        result = piped("pull", "org/a", str(dest), "--engine", "vllm")
        assert_one_line_about(result, dest, "no space left on the device", "bytes free", "nothing was written")
        assert list(disk.iterdir()) == []  # no half-copied DEST, no staging left beside it
        with pytest.raises(DestinationError) as caught:  # the library: an OSError with its errno
            eagleconv.pull("org/a", dest)
        assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
        assert caught.value.path == str(dest) and list(disk.iterdir()) == []
    assert (cache / "models--org--a").is_dir()  # the download itself succeeded: only the copy failed


def test_push_dry_run_staging_on_a_full_disk_is_one_line_naming_the_stage_dir(drafter, tmp_path):
    src = good(drafter)
    with mounted_tmpfs(tmp_path / "small", "size=16k") as disk:
        stage = disk / "S"
        result = piped("push", str(src), "org/d", "--dry-run", "--no-forward", "--stage-dir", str(stage))
        assert_one_line_about(result, stage, "no space left on the device", "bytes free", "nothing was written")
        assert list(disk.iterdir()) == []
        rerun = piped("push", str(src), "org/d", "--dry-run", "--no-forward", "--stage-dir", str(tmp_path / "S"))
        assert rerun.returncode == 0, rerun.stderr  # nothing blocks a rerun elsewhere


def test_push_staging_on_a_full_tmpdir_names_tmpdir_and_sends_nothing(hub, drafter, tmp_path, monkeypatch):
    src = good(drafter)
    with mounted_tmpfs(tmp_path / "small", "size=16k") as disk:
        monkeypatch.setenv("TMPDIR", str(disk))
        result = piped("push", str(src), "org/d", "--no-forward")
        err = assert_one_line_about(result, disk, "no space left on the device", "nothing was written")
        assert "eagleconv-push" not in err  # $TMPDIR, not the name of a copy nobody asked to see
        assert list(disk.iterdir()) == [] and hub.requests == []


def test_pull_overwrite_publishes_through_the_staged_directory(hub, drafter, cache, tmp_path):
    """--overwrite refuses a destination that is not a checkpoint, before any request, and leaves it as it was."""
    published(hub, drafter)
    dest = tmp_path / "p"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    before = len(hub.requests)
    result = piped("pull", "org/a", str(dest), "--overwrite")
    assert result.returncode == 2 and "not a checkpoint directory" in result.stderr, result.stderr
    assert len(hub.requests) == before and [p.name for p in dest.iterdir()] == ["notes.txt"]


# -- progress: library callbacks, bars on a terminal, nothing in a pipe ---------------------------------------

def _check_steps(calls: list[tuple[str, int, int]], expected: tuple[str, ...]) -> dict[str, int]:
    """Every step advances monotonically to its total, in the documented order; {step: total}."""
    order = list(dict.fromkeys(what for what, _, _ in calls))
    assert order == list(expected), order
    totals = {}
    for what in order:
        mine = [(done, total) for w, done, total in calls if w == what]
        assert [d for d, _ in mine] == sorted(d for d, _ in mine), what
        assert mine[-1][0] == mine[-1][1] > 0, (what, mine)
        totals[what] = mine[-1][1]
    return totals


def test_library_push_and_pull_report_every_step_in_bytes(hub, drafter, cache, tmp_path):
    src = good(drafter)
    calls: list[tuple[str, int, int]] = []
    report = eagleconv.push(src, "org/a", forward=False, progress=lambda *a: calls.append(a))
    assert report.ok, report.error
    totals = _check_steps(calls, STEPS["push"])
    checkpoint = sum((src / e.path).stat().st_size for e in report.files if e.path != "README.md")
    assert totals["copying to the staging directory"] == totals["hashing"] == checkpoint
    remote = hub.files("org/a")
    assert totals["uploading"] == sum(len(b) for name, b in remote.items() if name != ".gitattributes")

    calls.clear()
    dest = tmp_path / "p"
    pulled = eagleconv.pull("org/a", dest, progress=lambda *a: calls.append(a))
    assert pulled.destination == str(dest)
    totals = _check_steps(calls, STEPS["pull"])
    assert totals["downloading"] == sum(len(b) for b in remote.values())  # every file of the snapshot
    assert totals["copying to the destination"] == sum(p.stat().st_size for p in dest.iterdir())
    assert sorted(p.name for p in dest.iterdir()) == sorted({*pulled.files, MANIFEST})


def test_push_and_pull_show_progress_on_a_terminal_and_nothing_in_a_pipe(hub, drafter, cache, tmp_path):
    src = good(drafter)
    code, stderr = on_terminal("push", str(src), "org/a", "--no-forward", columns=120)
    assert code == 0, stderr
    for step in STEPS["push"]:
        assert re.search(rf"{step} .*\d+\.\d KiB/\d+\.\d KiB", stderr), (step, stderr)

    code, stderr = on_terminal("pull", "org/a", str(tmp_path / "p"), columns=120)
    assert code == 0, stderr
    for step in STEPS["pull"]:
        assert re.search(rf"{step} .*\d+\.\d KiB/\d+\.\d KiB", stderr), (step, stderr)

    pushed = piped("push", str(src), "org/b", "--no-forward")
    assert pushed.returncode == 0 and pushed.stderr == "", pushed.stderr
    pulled = piped("pull", "org/b", str(tmp_path / "q"))  # not in the cache yet: a real download
    assert pulled.returncode == 0 and pulled.stderr == "", pulled.stderr  # not even huggingface_hub's own bars

