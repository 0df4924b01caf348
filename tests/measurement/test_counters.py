"""Issue 36 items 3, 6, 8, 12, 16, 19 and issue 35 item 8: counters that must add up, reports read back through
their schema and the counter rules before anything is built from them, nothing from outside printed or carded
raw, and one numbering of draft positions.  Real sockets: a scripted server on 127.0.0.1 whose /metrics,
/version and replies a test writes; real report files."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock, Thread

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from tests.support.fake_server import FakeServer, reference

PROMPT = [[1, 17, 42, 99]]
TOKENS = [5, 6, 7, 8, 9, 10]
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\nline2"


class Scripted:
    """A vLLM-shaped server whose /metrics answers ``scrapes`` in turn (the last one repeats)."""

    def __init__(self, scrapes: list[str], version: str = "0.32.0", engine: str = "vllm",
                 timings: dict | None = None) -> None:
        self.scrapes, self.version, self.engine, self.timings = scrapes, version, engine, timings
        self.served = 0
        self.lock = Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, payload: object, status: int = 200) -> None:
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/metrics" and srv.scrapes:
                    with srv.lock:  # counted before answering: the next scrape may arrive on another thread first
                        n, srv.served = srv.served, srv.served + 1
                    self._send(srv.scrapes[min(n, len(srv.scrapes) - 1)])
                elif self.path == "/v1/models":
                    self._send({"data": [{"id": "fake/target"}]})
                elif self.path in ("/version", "/props"):
                    self._send({"version": srv.version, "build_info": srv.version})
                else:
                    self._send({"error": "not found"}, 404)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if srv.engine == "vllm":
                    self._send({"choices": [{"token_ids": TOKENS}]})
                else:
                    self._send({"tokens": TOKENS, "timings": srv.timings or {}})

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def metrics(drafts: float, drafted: float, accepted: float, per_pos: dict[str, float], generated: float,
            model: str = "fake/target", extra: str = "") -> str:
    label = f'model_name="{model}"'
    lines = [f"vllm:generation_tokens_total{{{label}}} {generated}",
             f"vllm:spec_decode_num_drafts_total{{{label}}} {drafts}",
             f"vllm:spec_decode_num_draft_tokens_total{{{label}}} {drafted}",
             f"vllm:spec_decode_num_accepted_tokens_total{{{label}}} {accepted}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{label},position="{p}"}} {v}'
              for p, v in per_pos.items()]
    return "\n".join(lines) + "\n" + extra


ZERO = metrics(0, 0, 0, {"0": 0, "1": 0, "2": 0}, 0)


def measure(server: Scripted, tmp_path, *args: str):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPT))
    return CliRunner().invoke(cli, ["measure", server.url, "--prompts", str(prompts), "--max-tokens", "6", *args])


@pytest.fixture
def scripted():
    servers: list[Scripted] = []

    def make(*args, **kwargs) -> Scripted:
        servers.append(Scripted(*args, **kwargs))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


@pytest.mark.parametrize("after, rule", [
    (metrics(36, 108, 590, {"0": 41, "1": 0, "2": 0}, 6), "590 drafts accepted of 108 drafted"),
    (metrics(3, 9, 4, {"0": 1, "1": 3, "2": 0}, 6), "position 2 accepted 3 drafts, more than position 1's 1"),
    (metrics(3, 9, 5, {"0": 2, "1": 1, "2": 0}, 6), "per-position counts sum to 3, not the 5 drafts accepted"),
    (metrics(2, 9, 3, {"0": 2, "1": 1, "2": 0}, 6), "9 draft tokens in 2 rounds of K=3"),
    (metrics(3, 9, 3, {"0": 2, "1": 1, "2": 0}, 6) + "vllm:spec_decode_num_drafts_total 1e17\n", "past 2^53"),
    (metrics(3, 9, 3, {"0": 2, "1": 1, "2": 0}, 6).replace(" 9", " NaN"), "nan"),
    (metrics(3, 9, 3, {"0": 2, "1000": 1, "2000": 0}, 6), "position 0, 1000, 2000, not 0..K-1"),
])
def test_counters_that_do_not_add_up_are_refused_in_one_line(scripted, tmp_path, after, rule):
    server = scripted([ZERO, after])
    for extra in ([], ["--json"]):
        result = measure(server, tmp_path, *extra)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and rule in lines[0] and server.url in lines[0], result.stderr
        assert "acceptance length" not in result.stdout
        server.served = 0


def test_per_position_counters_going_backwards_are_refused(scripted, tmp_path):
    before = metrics(3, 9, 3, {"0": 2, "1": 1, "2": 0}, 0)
    server = scripted([before, metrics(6, 18, 5, {"0": 4, "1": 0, "2": 1}, 6)])
    result = measure(server, tmp_path)
    assert result.exit_code == 2 and "accepted at position 2 went backwards (1 -> 0)" in result.stderr


def test_counters_of_another_model_are_not_summed_in(scripted, tmp_path):
    other = metrics(1000, 3000, 2999, {"0": 1000, "1": 1000, "2": 999}, 1000, model="other/model")
    server = scripted([ZERO + other, metrics(3, 9, 3, {"0": 2, "1": 1, "2": 0}, 6) +
                       other.replace("1000", "2000")])
    result = measure(server, tmp_path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["num_drafts"], report["num_draft_tokens"], report["num_accepted_tokens"]) == (3, 9, 3)
    assert report["accepted_per_position"] == [2, 1, 0] and report["acceptance_length"] == 2.0


@pytest.mark.parametrize("timings, rule", [({"draft_n": -500, "draft_n_accepted": 0}, "timings.draft_n is -500"),
                                           ({"draft_n": 4, "draft_n_accepted": 9}, "9 drafts accepted of 4")])
def test_llama_server_timings_that_are_not_counts_are_refused(scripted, tmp_path, timings, rule):
    server = scripted([], engine="llama.cpp", timings=timings)
    result = measure(server, tmp_path, "--engine", "llama.cpp")
    assert result.exit_code == 2 and rule in result.stderr, result.output


def test_a_hostile_version_is_printed_escaped(scripted, tmp_path):
    server = scripted([ZERO, metrics(3, 9, 3, {"0": 2, "1": 1, "2": 0}, 6)], version=HOSTILE)
    result = measure(server, tmp_path)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert r"\x1b]0;pwned\x07\x1b[2J\nline2" in result.output
    assert not any(line.startswith("line2") for line in result.output.splitlines())


def test_measure_numbers_positions_from_one_and_states_k(scripted, tmp_path):
    """llama-server's cut drafts: 10 draft tokens in 4 rounds is no whole K, but three per-position counters are
    K=3 (main printed K=None here, and numbered the positions 0..2 where simulate prints 1..3)."""
    server = scripted([ZERO, metrics(4, 10, 3, {"0": 2, "1": 1, "2": 0}, 6)])
    result = measure(server, tmp_path)
    assert result.exit_code == 0, result.output
    assert "K=3," in result.output and "K=None" not in result.output
    rows = [line.split() for line in result.output.splitlines() if line.strip()[:1].isdigit() and "/4" in line]
    assert [r[0] for r in rows] == ["1", "2", "3"] and [r[1] for r in rows] == ["2/4", "1/4", "0/4"]


def test_a_build_0_server_is_labelled_from_engine_build(scripted, tmp_path):
    scrapes = [m.replace("vllm:", "llamacpp:").replace("generation_tokens", "tokens_predicted")
               for m in (ZERO, metrics(3, 9, 3, {"0": 2, "1": 1, "2": 0}, 6))]
    server = scripted(scrapes, version="b0-unknown", engine="llama.cpp")
    plain = measure(server, tmp_path, "--engine", "llama.cpp", "--json")
    assert plain.exit_code == 0, plain.output
    report = json.loads(plain.stdout)
    assert report["engine_version"] is None and any("build b0-unknown" in n for n in report["notes"])
    server.served = 0
    report = json.loads(measure(server, tmp_path, "--engine", "llama.cpp", "--engine-build", "11434.0.0",
                                "--json").stdout)
    assert report["engine_version"] == "b11434"
    assert any("from --engine-build 11434.0.0" in n and "b0-unknown" in n for n in report["notes"])


def test_simulate_and_measure_share_the_max_tokens_default():
    import inspect

    from eagleconv.measurement import measure as measure_fn
    from eagleconv.simulation import simulate

    measure_cmd, simulate_cmd = cli.commands["measure"], cli.commands["simulate"]
    defaults = {next(p.default for p in cmd.params if p.name == "max_tokens") for cmd in (measure_cmd, simulate_cmd)}
    defaults |= {inspect.signature(f).parameters["max_tokens"].default for f in (measure_fn, simulate)}
    assert len(defaults) == 1, defaults


# ---- reports read back: --against and push --acceptance -------------------------------------------------------

@pytest.fixture
def fake():
    srv = FakeServer().start()
    yield srv
    srv.stop()


def against(server: FakeServer, tmp_path, report: dict):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPT))
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path, CliRunner().invoke(cli, ["measure", server.url, "--prompts", str(prompts), "--max-tokens", "20",
                                          "--against", str(path)])


def simulated(**edits) -> dict:
    report = reference(PROMPT, 20)
    report.update(edits)
    return report


@pytest.mark.parametrize("edits, rule", [
    ({"num_speculative_tokens": 300_000_000}, "K (num_speculative_tokens) 300000000 is over 64"),
    ({"num_speculative_tokens": 4}, "3 per-position counts for K=4"),
    ({"num_speculative_tokens": -2}, "K (num_speculative_tokens) -2 is not at least 1"),
    ({"max_tokens": "20"}, "max_tokens: Input should be a valid integer"),
    ({"num_accepted_tokens": 590, "num_draft_tokens": 108}, "590 drafts accepted of 108 drafted"),
    ({"accepted_per_position": [-976, -987, -996]}, "has a negative count"),
    ({"acceptance_length": 17.3889}, "acceptance_length 17.3889 is not 1 + "),
])
def test_against_refuses_a_report_that_breaks_its_schema_or_counters(fake, tmp_path, edits, rule):
    start = time.perf_counter()
    path, result = against(fake, tmp_path, simulated(**edits))
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and str(path) in result.stderr and rule in result.stderr, result.stderr
    assert time.perf_counter() - start < 5  # main spent 2.4 GB on [0] * K first
    assert fake.requests == []  # refused before the server is asked anything


def test_against_refuses_a_measure_report_with_prompts_of_ints(fake, tmp_path):
    report = {**simulated(), "prompts": [1, 2, 3]}
    del report["drafts"]
    _, result = against(fake, tmp_path, report)
    assert result.exit_code == 2 and "schemas/report-measure.schema.json" in result.stderr, result.output


# ---- the card ---------------------------------------------------------------------------------------------------

def push_card(drafter, report: dict, tmp_path) -> tuple[int, str, str]:
    from tests.support.hub import good

    path = tmp_path / "acceptance.json"
    path.write_text(json.dumps(report))
    result = CliRunner().invoke(cli, ["push", str(good(drafter)), "org/d", "--dry-run", "--no-forward", "--json",
                                      "--stage-dir", str(tmp_path / "stage"), "--acceptance", str(path)])
    card = json.loads(result.stdout).get("model_card") or "" if result.stdout.startswith("{") else ""
    return result.exit_code, card, result.stderr


def test_a_hostile_version_and_report_never_reach_the_card_raw(scripted, drafter, tmp_path):
    server = scripted([ZERO, metrics(3, 9, 3, {"0": 2, "1": 1, "2": 0}, 6)], version=HOSTILE)
    measured = measure(server, tmp_path, "--json")
    assert measured.exit_code == 0, measured.output
    report = json.loads(measured.stdout)
    report["engine_version"] += "\n## Security audit: PASSED\n<img src=x onerror=alert(1)>"
    code, card, err = push_card(drafter, report, tmp_path)
    assert code == 0 and card, err
    assert "\x1b" not in card and "\x07" not in card
    assert not any(line.startswith(("## Security", "line2", "<img")) for line in card.splitlines())
    _, front, body = card.split("---\n", 2)
    assert "<img" not in body and "&lt;img src=x onerror=alert\\(1\\)&gt;" in body
    import yaml  # the metadata: one quoted YAML string, control characters shown escaped, as the report said

    task = yaml.safe_load(front)["model-index"][0]["results"][0]["task"]["name"]
    assert task.startswith(r"speculative decoding (vllm \x1b]0;pwned\x07\x1b[2J\nline2\n## Security audit")
    acceptance = next(line for line in card.splitlines() if line.startswith("Acceptance length"))
    assert "\\\\x1b\\]0;pwned" in acceptance and "\\#\\# Security audit: PASSED" in acceptance
    assert "| 1 | 0.6667 |" in card and "acceptance_rate_position_1" in card  # positions 1..K on the card too


@pytest.mark.parametrize("edits, rule", [
    ({"num_accepted_tokens": 590, "num_draft_tokens": 108, "acceptance_length": 17.3889},
     "590 drafts accepted of 108 drafted"),
    ({"acceptance_length": -3.5, "num_speculative_tokens": -7}, "K (num_speculative_tokens) -7"),
])
def test_push_refuses_an_acceptance_report_that_does_not_add_up(drafter, tmp_path, edits, rule):
    code, card, err = push_card(drafter, simulated(**edits), tmp_path)
    assert code == 2 and rule in err and card == "" and not (tmp_path / "stage").exists(), err


def test_the_rules_on_their_own():
    from eagleconv.measurement.invariants import Counts, broken

    assert broken(Counts(drafted=9, accepted=3, rounds=3, k=3, per_position=[2, 1, 0], acceptance_length=2.0)) is None
    assert broken(Counts(drafted=0, accepted=0, rounds=0, k=3, per_position=[0, 0, 0])) is None
    assert "2^53" in (broken(Counts(drafted=2**60, accepted=0)) or "")
    assert "exactly" not in (broken(Counts(9, 3, 3, 3, [3], per_position_is_k=True)) or "")
    assert broken(Counts(9, 3, 3, 3, [3], per_position_is_k=True)) == "1 per-position counts for K=3"


@pytest.mark.parametrize("engine", [["--engine", "vllm:0.32"], ["--engine", "llama.cpp"],
                                    ["--engine", "llama.cpp", "--llamacpp-loop", "simple"]])
def test_simulates_own_reports_obey_the_rules_and_read_back(tmp_path, engine):
    """Every simulate loop's report satisfies the rules push --acceptance and --against apply (else a true report
    could not be published), and simulate itself checks them before printing."""
    from pathlib import Path

    from eagleconv.measurement.readback import read_report

    pair = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"
    result = CliRunner().invoke(cli, ["simulate", str(pair / "eagle3"), "--target", str(pair / "target"), "--prompts",
                                      str(pair / "prompts.json"), "--max-tokens", "8", "--json", *engine])
    assert result.exit_code == 0, result.output
    path = tmp_path / "sim.json"
    path.write_text(result.stdout)
    report = read_report(path)
    assert report.num_draft_tokens > 0 and len(report.accepted_per_position) == report.num_speculative_tokens


def test_every_rich_line_escapes_control_characters(capsys):
    """The CLI's console escapes what a caller did not (issue 36 item 12): a table cell and a line holding an
    escape sequence, a bell and a newline print as text, while the layout's own line breaks stay."""
    from rich.table import Table

    from eagleconv.cli.app import _console

    table = Table("name")
    table.add_row("cell\x1b[31m" + HOSTILE)
    console = _console()
    console.print(table)
    console.print(f"[bold]line[/bold] {HOSTILE}\nnext")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert r"cell\x1b[31m\x1b]0;pwned" in out and out.rstrip().endswith("next")
