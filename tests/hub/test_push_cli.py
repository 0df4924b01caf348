"""push as a new user meets it (issue 27 items 2 and 13): in the core install, with --hide-info, sizes in binary
units like every other size eagleconv prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner
from tests.packaging.test_core_install import BLOCKED, child

from eagleconv.cli.main import cli
from eagleconv.cli.render import human_bytes

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "vllm-qwen3-eagle31"


def test_push_in_the_core_install_skips_the_forward_check_and_says_why(tmp_path):
    proc = child(BLOCKED, "push", str(FIXTURE), "my-org/qwen3-eagle3", "--dry-run", "--json",
                 "--stage-dir", str(tmp_path / "stage"), tmp=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] and report["validation"]["forward"] is None
    (note,) = [n for n in report["notes"] if "forward" in n]
    assert note.startswith("forward pass skipped: push's forward check needs torch"), note
    assert "pip install 'eagleconv[forward]'" in note and "--no-forward" in note
    assert (tmp_path / "stage" / "MANIFEST.json").is_file()
    # with --no-forward: no such note, the same files staged
    proc = child(BLOCKED, "push", str(FIXTURE), "my-org/qwen3-eagle3", "--dry-run", "--json", "--no-forward",
                 "--stage-dir", str(tmp_path / "stage2"), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not [n for n in json.loads(proc.stdout)["notes"] if "skipped" in n]


def test_push_hides_infos_and_prints_binary_sizes(tmp_path):
    args = ["push", str(FIXTURE), "my-org/qwen3-eagle3", "--dry-run", "--no-forward"]
    report = json.loads(CliRunner().invoke(cli, [*args, "--json", "--stage-dir", str(tmp_path / "a")]).output)
    infos = [f for f in report["validation"]["findings"] if f["severity"] == "info"]
    assert infos
    shown = CliRunner().invoke(cli, [*args, "--stage-dir", str(tmp_path / "b")])
    hidden = CliRunner().invoke(cli, [*args, "--hide-info", "--stage-dir", str(tmp_path / "c")])
    assert shown.exit_code == hidden.exit_code == 0, hidden.output
    assert all(f["code"] in shown.output for f in infos)
    assert "EC062" not in hidden.output and f"{len(infos)} info(s) hidden" in hidden.output
    for entry in report["files"]:
        assert re.search(rf"{re.escape(entry['path'])}\s+{re.escape(human_bytes(entry['size']))}\s+sha256",
                         hidden.output), entry
    assert " bytes " not in hidden.output
