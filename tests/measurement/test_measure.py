"""eagleconv measure against a real HTTP server on 127.0.0.1 (tests/fake_server.py): counters, --against, the
one-line failures of bad servers (exit 2), the core install (no torch)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from tests.support.fake_server import FakeServer, reference

PROMPTS = [[1, 17, 42, 99, 7, 300], [1, 5, 5, 64, 128], [1, 250, 3, 77, 31, 2, 9], [1, 400, 401, 402]]


@pytest.fixture
def server():
    srv = FakeServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS))
    return path


def run(*args: str):
    return CliRunner().invoke(cli, ["measure", *args], catch_exceptions=False)


def test_counters_per_prompt_equal_the_engines_own_decode(server, prompts):
    result = run(server.url, "--prompts", str(prompts), "--max-tokens", "40", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    ref = reference(PROMPTS, 40)
    assert report["tokens"] == ref["tokens"]
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position"):
        assert report[key] == ref[key], key
    assert report["acceptance_length"] == pytest.approx(ref["acceptance_length"])
    assert report["num_speculative_tokens"] == 3 and report["engine_version"] == "0.32.0-fake"
    assert 0 < ref["num_accepted_tokens"] < ref["num_draft_tokens"]  # the fake drafter both hits and misses
    assert sum(p["num_drafts"] for p in report["prompts"]) == ref["num_drafts"]
    assert "bonus token included" in report["acceptance_length_definition"]
    assert len(report["prompts_sha256"]) == 64
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "report-measure.schema.json").read_text())
    jsonschema.validate(report, schema)


def test_against_simulate_same_then_first_differing_round(server, prompts, tmp_path):
    ref = reference(PROMPTS, 40)
    same = tmp_path / "sim.json"
    same.write_text(json.dumps(ref))
    result = run(server.url, "--prompts", str(prompts), "--max-tokens", "40", "--against", str(same))
    assert result.exit_code == 0, result.output
    assert "same" in result.output
    # one token changed in the reference: the round and position it falls in are named
    changed = json.loads(json.dumps(ref))
    changed["tokens"][2][9] = (changed["tokens"][2][9] + 1) % 1000
    bad = tmp_path / "changed.json"
    bad.write_text(json.dumps(changed))
    result = run(server.url, "--prompts", str(prompts), "--max-tokens", "40", "--against", str(bad), "--json")
    assert result.exit_code == 1
    against = json.loads(result.output)["against"]
    cursor, rnd = 1, 0
    for d in ref["drafts"][2][:-1]:  # the round that produced token 9, independently of measure's code
        a = 0
        while a < 3 and d[a] == ref["tokens"][2][cursor + a]:
            a += 1
        if cursor + a >= 9:
            break
        cursor, rnd = cursor + a + 1, rnd + 1
    # draft positions are numbered 1..K (K+1: the round's bonus token), as simulate numbers them
    assert (against["prompt"], against["round"], against["position"]) == (2, rnd, 9 - cursor + 1)
    assert against["first"].startswith(f"prompt 2, round {rnd}, position {9 - cursor + 1}: token")


def test_against_another_measure_report(server, prompts, tmp_path):
    first = run(server.url, "--prompts", str(prompts), "--max-tokens", "24", "--json")
    path = tmp_path / "first.json"
    path.write_text(first.stdout)
    again = run(server.url, "--prompts", str(prompts), "--max-tokens", "24", "--against", str(path), "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["against"]["kind"] == "measure", again.output
    edited = json.loads(first.stdout)
    edited["prompts"][1]["accepted_per_position"][0] += 1  # a report that still adds up, but differs at prompt 1
    edited["prompts"][1]["num_accepted_tokens"] += 1
    edited["accepted_per_position"][0] += 1
    edited["num_accepted_tokens"] += 1
    edited["acceptance_length"] = 1 + edited["num_accepted_tokens"] / edited["num_drafts"]
    path.write_text(json.dumps(edited))
    again = run(server.url, "--prompts", str(prompts), "--max-tokens", "24", "--against", str(path), "--json")
    against = json.loads(again.stdout)["against"]
    assert again.exit_code == 1 and (against["prompt"], against["position"]) == (1, 1), against


def test_counters_that_differ_are_named_by_prompt_and_position(server, prompts, tmp_path):
    ref = reference(PROMPTS, 40)
    ref["drafts"][3][0] = [(t + 1) % 1000 for t in ref["drafts"][3][0]]  # simulate's drafter differs in round 0
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(ref))
    result = run(server.url, "--prompts", str(prompts), "--max-tokens", "40", "--against", str(path), "--json")
    assert result.exit_code == 1
    against = json.loads(result.output)["against"]
    assert against["prompt"] == 3 and against["position"] is not None


def test_a_near_tie_is_shown_with_its_margin_not_absorbed(server, prompts, tmp_path):
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(reference(PROMPTS, 40)))
    server.fail, server.flip_prompt = "flip", PROMPTS[1]
    result = run(server.url, "--prompts", str(prompts), "--max-tokens", "40", "--against", str(path), "--json")
    assert result.exit_code == 1
    against = json.loads(result.output)["against"]
    assert against["prompt"] == 1 and against["margin"] == pytest.approx(0.01)
    assert "near-tie" in against["first"] and "margin there is 0.01" in against["first"]
    assert against["round"] is not None  # token 5 placed in the reference's round


def test_llama_server_metrics_and_timings(prompts):
    srv = FakeServer(engine="llama.cpp").start()
    try:
        result = run(srv.url, "--prompts", str(prompts), "--max-tokens", "30", "--engine", "llama.cpp", "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        ref = reference(PROMPTS, 30)
        assert report["num_drafts"] == ref["num_drafts"] and report["tokens"] == ref["tokens"]
        assert report["engine_version"] == "b11434-fake"
        for p in report["prompts"]:  # the replies' own draft counts agree with /metrics
            assert p["server_timings"]["draft_n"] == p["num_draft_tokens"]
            assert p["server_timings"]["draft_n_accepted"] == p["num_accepted_tokens"]
        srv.metrics = False  # llama-server without --metrics: the timings, and no AL
        report = json.loads(run(srv.url, "--prompts", str(prompts), "--max-tokens", "30", "--engine", "llama.cpp",
                                "--json").output)
        assert report["num_drafts"] is None and report["acceptance_length"] is None
        assert report["num_accepted_tokens"] == ref["num_accepted_tokens"]
    finally:
        srv.stop()


def test_llama_server_with_speculative_decoding_off(prompts):
    srv = FakeServer(engine="llama.cpp").start()
    srv.fail = "no-spec"  # its counters exist and stay at 0
    try:
        result = CliRunner().invoke(cli, ["measure", srv.url, "--prompts", str(prompts), "--engine", "llama.cpp"])
    finally:
        srv.stop()
    assert result.exit_code == 2 and "speculative decoding is off" in result.stderr, result.output


def test_concurrency_reports_totals_and_per_user_throughput(server, prompts):
    result = run(server.url, "--prompts", str(prompts), "--max-tokens", "20", "--concurrency", "4", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    ref = reference(PROMPTS, 20)
    assert report["num_accepted_tokens"] == ref["num_accepted_tokens"] and report["concurrency"] == 4
    assert all(p["num_drafts"] is None for p in report["prompts"])
    assert report["per_user_tokens_per_second"] > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case, expect", [
    ("refused", "connection refused"),
    ("slow", "no answer within 0.5 s"),
    ("no-spec", "speculative decoding is off"),
    ("vocab", "Token id 5000 is out of vocabulary"),
    ("model", "not other/model"),
    ("backwards", "went backwards"),
    ("traffic", "another client's traffic"),
    ("not-json", "not JSON"),
])
def test_bad_servers_one_line_exit_2(server, prompts, tmp_path, case, expect):
    url, args = server.url, []
    if case == "refused":
        url = f"http://127.0.0.1:{_free_port()}"
    elif case == "vocab":
        prompts.write_text(json.dumps([[1, 2, 3], [1, 5000]]))
    elif case == "model":
        args = ["--model", "other/model"]
    else:
        server.fail = case
    if case == "slow":
        args = ["--timeout", "0.5"]
    result = CliRunner().invoke(cli, ["measure", url, "--prompts", str(prompts), "--max-tokens", "8", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eagleconv: error: ") and expect in lines[0], lines
    assert "Traceback" not in result.output


def test_counters_that_lag_the_reply_are_waited_for(server, prompts):
    server.fail = "lag"
    result = run(server.url, "--prompts", str(prompts), "--max-tokens", "12", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["num_drafts"] == reference(PROMPTS, 12)["num_drafts"]


def test_measure_runs_without_torch(server, prompts):
    """The core install: measure imports neither torch nor transformers."""
    code = ("import sys; from eagleconv.cli.main import main; sys.argv=['eagleconv'] + sys.argv[1:]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'\n")
    proc = subprocess.run([sys.executable, "-c", code, "measure", server.url, "--prompts", str(prompts),
                           "--max-tokens", "8", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_drafts"] > 0
