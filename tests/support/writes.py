"""What a failed write must look like (one line, exit 2), and a real tmpfs to make writes fail on."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def assert_one_line_about(result: subprocess.CompletedProcess, destination: Path | str, *words: str) -> str:
    """Exit 2, one line, naming the destination and the problem; no staging path, traceback or 'internal error'."""
    err = result.stderr
    assert result.returncode == 2, (result.returncode, err)
    assert err.count("\n") == 1 and err.startswith("eagleconv: error: "), err
    assert str(destination) in err, err
    assert ".partial" not in err and ".eagleconv-" not in err and "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


@contextmanager
def mounted_tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)
