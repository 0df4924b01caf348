"""``push --dry-run`` keeps its staged copy in $TMPDIR and says that it may be deleted (issue 35 item 9)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_dry_run_names_its_staged_copy_and_says_it_may_be_deleted(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path), "COLUMNS": "400"}
    proc = subprocess.run([sys.executable, "-m", "eagleconv", "push", str(REPO / "fixtures" / "tiny-pair" / "eagle3"),
                           "my-org/tiny-eagle3", "--dry-run", "--no-numeric"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("staged copy"))
    staged = Path(re.search(r": (\S+eagleconv-push-\S+?)(;|$)", line).group(1))
    assert staged.parent == tmp_path and (staged / "README.md").is_file()  # kept: the card and manifest to read
    assert "delete it when done" in line
