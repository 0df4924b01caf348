"""The card states what was checked: push writes the engine matrix and, with --acceptance, the measured AL as
model-index evaluation results; pull prints them back (a real HTTP Hub on 127.0.0.1, tests/fake_hub.py, and a
measure report from a real HTTP server, tests/fake_server.py)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.hub import PullReport, PushReport
from tests.support.fake_server import FakeServer
from tests.support.hub import good, hub  # noqa: F401 - the loopback Hub fixture

PROMPTS = [[1, 17, 42, 99, 7, 300], [1, 5, 5, 64, 128], [1, 400, 401, 402]]
EFFECT_RANK = {"load_fails": "fails", "runs_differently": "runs differently", "unverified": "loads"}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def measured(tmp_path) -> tuple[dict, str]:
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    srv = FakeServer().start()
    try:
        result = run("measure", srv.url, "--prompts", prompts, "--max-tokens", 24, "--json")
    finally:
        srv.stop()
    assert result.exit_code == 0, result.output
    path = tmp_path / "measure.json"
    path.write_text(result.stdout)
    return json.loads(result.stdout), str(path)


def test_push_writes_the_engine_matrix_and_acceptance_and_pull_prints_them(hub, drafter, tmp_path):
    report, path = measured(tmp_path)
    src = good(drafter)
    result = run("push", src, "org/d", "--endpoint", hub.url, "--engine", "all", "--acceptance", path, "--json")
    assert result.exit_code == 0, result.output
    pushed = PushReport.model_validate_json(result.stdout)
    card = pushed.model_card
    assert "model-index" in card and "acceptance_length" in card and "## Engine matrix" in card
    pulled_run = run("pull", "org/d", tmp_path / "out", "--endpoint", hub.url, "--engine", "all", "--json")
    assert pulled_run.exit_code == 0, pulled_run.output
    pulled = PullReport.model_validate_json(pulled_run.stdout)
    acc = pulled.card.acceptance
    assert acc.acceptance_length == round(report["acceptance_length"], 4)
    assert acc.num_speculative_tokens == report["num_speculative_tokens"] == 3
    assert acc.acceptance_per_position == [round(n / report["num_drafts"], 4) for n in report["accepted_per_position"]]
    assert (acc.engine, acc.engine_version, acc.source) == ("vllm", "0.32.0-fake", "measure")
    assert acc.prompts_sha256 == report["prompts_sha256"]
    # the matrix: one verdict per engine profile validated, decided by the worst effect among its findings
    validation = pushed.validation
    assert [e.engine for e in pulled.card.engines] == validation.engines
    for e in pulled.card.engines:
        effects = {f.effect for f in validation.findings if f.engine in (e.engine, None)}
        want = next((v for k, v in EFFECT_RANK.items() if k in effects), "runs as intended")
        assert e.verdict == want, e
        assert set(e.codes) == {f.code for f in validation.findings if f.engine in (e.engine, None)
                                and EFFECT_RANK.get(f.effect or "") == want}
    assert len({e.verdict for e in pulled.card.engines}) > 1  # the fixture is read differently by some engines
    text = run("pull", "org/d", tmp_path / "again", "--endpoint", hub.url, "--engine", "all")
    assert "card: acceptance length" in text.output and "card: vllm 0.32:" in text.output


def test_push_refuses_a_bad_acceptance_report_before_any_request(hub, drafter, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tokens": []}))
    result = run("push", good(drafter), "org/d", "--endpoint", hub.url, "--acceptance", bad)
    assert result.exit_code == 2 and "not a simulate or measure report" in result.stderr
    assert hub.requests == []
