"""The CI tiers' own checks that run without vLLM (issue 32): what makes ``.ci/vllm-parity --written-archs`` fail
when the live run leaves its record, and ``.ci/measure-servers --drafter``'s argument errors (one line, exit 2,
before anything is written or started)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("safetensors")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def written_archs():
    sys.path.insert(0, str(REPO / ".ci"))
    try:
        import vllm_written_archs
    finally:
        sys.path.remove(str(REPO / ".ci"))
    return vllm_written_archs


def test_written_archs_live_run_must_equal_its_record(written_archs):
    """A live run equal to the record passes; one counter off, or another architecture written, fails naming the
    case, the field and the record file."""
    record = json.loads(written_archs.RECORD.read_text())["cases"]
    assert len(record) == 2
    for name, recorded in record.items():
        live = {"name": name, **recorded}
        assert written_archs.stale(live, recorded) == []
        drafted = {**live, "vllm": {**recorded["vllm"], "num_drafts": recorded["vllm"]["num_drafts"] + 1}}
        [problem] = written_archs.stale(drafted, recorded)
        assert problem.startswith(f"{name}: vllm ") and written_archs.RECORD.name in problem
        relabelled = {**live, "architectures": ["Eagle3Phi3ForCausalLM"]}
        [problem] = written_archs.stale(relabelled, recorded)
        assert "architectures ['Eagle3Phi3ForCausalLM'] live" in problem
    assert written_archs.stale({"name": "new", "vllm": {}}, None) == []  # --record: nothing to compare with


@pytest.mark.parametrize(("args", "says"), [
    (["--drafter", "eagle31"], "--drafter eagle31 is served by vLLM only: add --only vllm (or --mla)"),
    (["--drafter", "eagle4", "--mla"], "no drafter fixtures/mla-pair/dense/eagle4"),
])
def test_measure_servers_refuses_a_drafter_it_cannot_serve(tmp_path, args, says):
    work = tmp_path / "work"
    proc = subprocess.run(["bash", ".ci/measure-servers", "fixtures/mla-pair/dense", *args, "--work", str(work)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"measure-servers: {says}"
    assert not work.exists()
