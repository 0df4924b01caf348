"""Issue 36 deliverable 5: ``measure`` against a randomised hostile server (tests/support/hostile_server.py on
127.0.0.1): drips, endless or lying bodies, NaN and Infinity, deep nesting, wrong types, odd statuses, on any
endpoint.  Each run, in a child under an address-space rlimit, ends within its requests' deadlines + 5 s, with one
line and exit 2, or with a report whose counters hold (0 <= accepted <= drafted).

The suite runs a few examples; ``.ci/fuzz SECONDS`` runs this property for SECONDS
(``python -m tests.measurement.test_hostile_property SECONDS``).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hostile_server import Behaviour, HostileServer, drip, endless, reply

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 1.0
REQUESTS = 6  # what one prompt costs at most: models, props, /metrics, the completion (and /metrics twice more)
MEMORY = 2 << 30  # the child's address space: a body that grows past its cap would hit this
PATHS = ("/completion", "/metrics", "/v1/models", "/props")
CHILD = ("import sys, time; from eagleconv.cli.main import main; clock = sys.argv.pop(); start = time.monotonic()\n"
         "try:\n    main()\nfinally:\n    open(clock, 'w').write(str(time.monotonic() - start))\n")

_json = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                     max_leaves=12)
_tokens = st.lists(st.integers(-5, 2 ** 64) | st.floats() | st.text(max_size=3) | st.booleans(), max_size=6)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


_bodies = st.one_of(
    _json.map(json.dumps),  # wrong types anywhere, NaN and Infinity as json.dumps writes them
    st.builds(lambda t, d: json.dumps({"tokens": t, "timings": {"draft_n": d, "draft_n_accepted": 1}}), _tokens, _json),
    st.integers(10, 100_000).map(_nested),
    st.just('{"data": 5}'), st.just("null"), st.just("<html>502</html>"),
    st.just("llamacpp:spec_decode_num_drafts_total NaN\n"),
)
_behaviours: st.SearchStrategy[Behaviour] = st.one_of(
    st.builds(lambda s, b: reply(s, b), st.sampled_from([200, 200, 200, 301, 307, 400, 404, 500, 501]), _bodies),
    st.builds(lambda every: drip(every=every, limit=20), st.floats(0.02, 0.3)),
    st.just(endless(limit=20)),
    st.just(reply(200, b"{}", headers=(("Content-Length", str(10 ** 12)),))),
)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def check(routes: dict[str, Behaviour]) -> None:
    """One run of ``measure`` against ``routes`` (the rest answer as a good llama-server without --metrics)."""
    with tempfile.TemporaryDirectory() as tmp, HostileServer(routes) as srv:
        prompts, clock = Path(tmp) / "prompts.json", Path(tmp) / "elapsed"
        prompts.write_text("[[1, 2, 3]]")
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        proc = subprocess.run([sys.executable, "-c", CHILD, "measure", srv.url, "--prompts", str(prompts),
                               "--engine", "llama.cpp", "--max-tokens", "4", "--timeout", str(TIMEOUT), "--json",
                               str(clock)], env=env, preexec_fn=_limits, capture_output=True, text=True, timeout=120)
        elapsed = float(clock.read_text())
    assert elapsed < REQUESTS * TIMEOUT + 5, (elapsed, proc.stderr[-500:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-2000:]
    if proc.returncode == 2:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("eagleconv: error: "), proc.stderr[-2000:]
        assert srv.url in lines[0] or "prompt" in lines[0], lines
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        report = json.loads(proc.stdout)
        assert 0 <= report["num_accepted_tokens"] <= report["num_draft_tokens"], report


@settings(max_examples=int(os.environ.get("EAGLECONV_FUZZ_EXAMPLES", "3")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(PATHS), _behaviours, min_size=1, max_size=2))
def test_measure_against_a_hostile_server_ends_in_time_in_one_line_or_a_report(routes):
    check(routes)


if __name__ == "__main__":  # .ci/fuzz: the same property for a budget of seconds
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    end, runs = time.monotonic() + budget, 0
    os.environ["EAGLECONV_FUZZ_EXAMPLES"] = "5"
    while time.monotonic() < end:
        test_measure_against_a_hostile_server_ends_in_time_in_one_line_or_a_report()
        runs += 5
    print(f"hostile-server fuzz: {runs} runs of measure in {budget:.0f} s, each one line and exit 2 or a report")
