"""``eagleconv audit`` against the loopback Hub: one row per repository, failures as rows, a rows file that a
SIGKILL cannot corrupt and ``--resume`` continues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

import eagleconv.hubread.ranges as ranges
from eagleconv.hub import AuditRow, AuditSummary, RowsFile, audit, parse_repo, search
from tests.support.hub import hub, run  # noqa: F401 - the loopback Hub fixture
from tests.support.hub_repos import directory_files, fixture_checkpoints, publish

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
FIXTURES = fixture_checkpoints()


@pytest.fixture
def populated(hub, monkeypatch):
    """Every fixture as eagle3/NAME, plus one repository per failure state; 5xx retried at once."""
    monkeypatch.setattr(ranges, "BACKOFF", 0.0)
    hub.retry_after = 0
    for name, directory in FIXTURES.items():
        publish(hub, "eagle3/" + name.split("/", 1)[1], directory)
    spec = directory_files(FIXTURES["fixtures/speculators-llama-eagle31"])
    hub.add("other/bert", {"config.json": b'{"model_type": "bert", "hidden_size": 8}',
                           "model.safetensors": b"\x02\0\0\0\0\0\0\0{}"})
    hub.add("other/readme-only", {"README.md": b"nothing here"})
    hub.add("locked/eagle3-gated", spec, gated=True)
    hub.add("locked/eagle3-private", spec, private=True)
    hub.add("busy/eagle3-throttled", spec)
    hub.add("down/eagle3-broken", spec)
    hub.add("bad/eagle3-hostile", {**spec, "model.safetensors": (2**40).to_bytes(8, "little") + b"{}"})
    hub.throttle["busy/eagle3-throttled"] = 10**6
    hub.broken.add("down/eagle3-broken")
    return hub


EXPECTED = {"other/bert": "not-eagle", "other/readme-only": "not-eagle", "locked/eagle3-gated": "gated",
            "locked/eagle3-private": "private", "busy/eagle3-throttled": "rate-limited",
            "down/eagle3-broken": "failed", "bad/eagle3-hostile": "unsafe", "nobody/eagle3-missing": "missing",
            "eagle3/eagle-llama-eagle3": "pickle"}
# the pairs' target models (tiny-pair, mla-pair, the MLA verdict matrix's): plain models' configs, not drafters
TARGETS = {"eagle3/" + name.split("/", 1)[1]: "not-eagle" for name, path in FIXTURES.items()
           if path.name.startswith("target")}
EXPECTED.update(TARGETS)


def test_every_failure_is_its_own_row_state(populated, tmp_path):
    repos = [*EXPECTED, *(r for r in populated.repos if r.startswith("eagle3/") and r not in EXPECTED)]
    out = tmp_path / "rows.jsonl"
    summary = audit(repos, engines=["vllm", "llama.cpp"], jobs=4, out=out, token=False)
    rows = {r.repo_id: r for r in summary.rows}
    assert [r.repo_id for r in summary.rows] == repos  # in the order asked, whatever order they finished in
    assert {k: rows[k].state for k in EXPECTED} == EXPECTED
    for name in EXPECTED:
        assert rows[name].error or rows[name].first_error, name  # one line says why
    judged = [r for r in summary.rows if r.state == "audited"]
    assert len(judged) == len(FIXTURES) - 1 - len(TARGETS)  # every fixture but the pickle and the targets
    for row in judged:
        assert row.commit == populated.repos[row.repo_id].refs["main"] and row.bytes_transferred > 0
        assert [v.engine for v in row.engines] == ["vllm 0.32", "llama.cpp b11434"] and row.layout
    qwen = rows["eagle3/vllm-qwen3-eagle31"]
    assert qwen.eagle_version == "3.1" and qwen.eagle31_flags == ["fc_norm", "norm_output"]
    assert qwen.architecture == "qwen3" and qwen.aux_layer_convention == "hidden_state_index"
    verdicts = {v.engine: v.verdict for v in qwen.engines}
    assert verdicts == {"vllm 0.32": "runs as intended", "llama.cpp b11434": "fails"}
    assert qwen.first_error is not None and qwen.first_error.startswith("EC02")
    assert summary.ok and summary.repositories == len(repos)  # --fail-on never: the audit ran
    lines = out.read_bytes().splitlines()
    assert sorted(AuditRow.model_validate_json(line).repo_id for line in lines) == sorted(repos)
    schema = json.loads((SCHEMAS / "audit-row.schema.json").read_text())
    for line in lines:
        jsonschema.validate(json.loads(line), schema)


def test_resume_skips_what_the_rows_file_holds_and_redoes_a_torn_line(populated, tmp_path):
    repos = sorted(r for r in populated.repos if r.startswith("eagle3/"))
    out = tmp_path / "rows.jsonl"
    audit(repos[:3], out=out, jobs=2)
    with open(out, "ab") as f:
        f.write(AuditRow(repo_id=repos[3], state="audited").model_dump_json().encode()[:25])  # killed mid-write
    before = len(populated.requests)
    summary = audit(repos, out=out, resume=True, jobs=2)
    asked = {p.split("/api/models/")[1].split("/revision")[0] for _, p in populated.requests[before:]
             if p.startswith("/api/models/")}
    assert asked == set(repos[3:])  # the three complete rows were not read again; the torn one was
    assert summary.skipped == 3 and [r.repo_id for r in summary.rows] == repos
    assert sorted(AuditRow.model_validate_json(x).repo_id for x in out.read_bytes().splitlines()) == repos
    with pytest.raises(Exception, match="--resume continues it"):
        audit(repos, out=out)


def test_search_author_and_limit_go_through_list_models(populated):
    found = search("eagle3", endpoint=populated.url)
    assert "other/bert" not in found and "eagle3/vllm-phi3-eagle3" in found
    assert set(search(author="locked")) == {"locked/eagle3-gated", "locked/eagle3-private"}
    assert len(search("eagle3", limit=2)) == 2
    assert parse_repo("hf://org/name@v1").revision == "v1" and parse_repo("org/name").revision is None


def test_cli_search_table_json_and_fail_on(populated, tmp_path):
    args = ["audit", "--search", "eagle3", "--author", "eagle3", "--engine", "vllm", "--engine", "llama.cpp"]
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    jsonschema.validate(data, json.loads((SCHEMAS / "report-audit.schema.json").read_text()))
    summary = AuditSummary.model_validate(data)
    assert summary.with_errors > 0 and set(summary.verdicts) == {"vllm 0.32", "llama.cpp b11434"}
    assert run(*args, "--fail-on", "error").exit_code == 1
    table = run(*args)
    assert table.exit_code == 0 and "runs as intended" in table.output and "with error findings" in table.output
    listed = tmp_path / "repos.txt"
    listed.write_text("# mine\neagle3/vllm-phi3-eagle3\n\nnobody/eagle3-missing  # gone\n")
    result = run("audit", "--from", listed, "--json", "--fail-on", "error")
    assert result.exit_code == 1 and json.loads(result.stdout)["states"] == {"audited": 1, "missing": 1}
    result = run("audit")
    assert result.exit_code == 2 and "nothing to audit" in result.output


def test_sigkill_then_resume_lists_every_repository_exactly_once(populated, tmp_path):
    """A real process killed with SIGKILL mid-audit, then --resume: nothing lost, nothing twice."""
    repos = sorted(r for r in populated.repos if r.startswith("eagle3/"))
    for repo in repos:
        populated.slow[repo] = 0.15  # each request waits: the kill lands mid-audit
    out = tmp_path / "rows.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_ENDPOINT": populated.url}
    command = [sys.executable, "-m", "eagleconv", "audit", *repos, "--jobs", "2", "--out", str(out), "--json"]
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 2):
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    written = out.read_bytes().count(b"\n")
    assert 2 <= written < len(repos), "the kill should land mid-audit"
    populated.slow.clear()
    done = subprocess.run([*command, "--resume"], env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    ids = [AuditRow.model_validate_json(line).repo_id for line in out.read_bytes().splitlines()]
    assert sorted(ids) == repos  # every repository exactly once
    assert json.loads(done.stdout)["skipped"] >= written


def test_rows_file_refuses_a_file_that_is_not_rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("not json\n{}\n")
    with pytest.raises(Exception, match="line 1 is not an audit row"):
        RowsFile(path).read()
