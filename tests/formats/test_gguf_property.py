"""The randomised GGUF property (tests/fuzz/fuzz_gguf.py), its cheap run: a few fixed hostile files through inspect,
validate and convert in a child process under an address-space rlimit (resource.setrlimit: the limit needs a
process of its own).  ``.ci/fuzz`` runs it for longer, on new inputs each time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")
pytest.importorskip("hypothesis")

REPO = Path(__file__).resolve().parents[2]


def test_hostile_gguf_files_are_read_or_refused_in_one_line_under_an_rlimit() -> None:
    done = subprocess.run([sys.executable, str(REPO / "tests" / "fuzz" / "fuzz_gguf.py"), "--examples", "6",
                           "--rlimit-mb", "1024"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "files through inspect, validate and convert" in done.stdout
