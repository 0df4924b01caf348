"""A new engine, defined and registered here only, is offered everywhere with no change to eagleconv/.

``toyserve 1.0`` reads a drafter as vLLM 0.32 does (its profile is vLLM's data under another name), decodes with
a loop this module defines (``decode_loop`` names this module: its ``simulate_loop`` runs vLLM's proposer and
records that it ran), and its servers speak vLLM's protocol (``server="vllm"``).  ``toycpp 1`` is llama.cpp's
profile under another name: simulate runs llama.cpp's loop for it because the profile names that loop, not because
of the engine's name.  Registered for this module only (and removed after), they go through validate
(``--engine toyserve``, ``all``), convert and validate of every layout's copy, simulate, measure against a real
HTTP server, ``eagleconv findings``, and the engine contract (tests/engines/test_view.py's every-engine check).
The recipe in ``eagleconv/engines/__init__.py`` and docs/architecture.md names exactly the files these stand in for.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import eagleconv
from eagleconv import engines
from eagleconv.cli.main import cli
from eagleconv.engines.llamacpp import LLAMACPP_B11434
from eagleconv.engines.vllm import VLLM_032
from eagleconv.measurement import servers

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
PROMPTS = [[1, 17, 42, 99, 7, 300], [1, 5, 5, 64, 128], [1, 250, 3, 77, 31, 2, 9]]
RAN: list[str] = []  # the engines this module's loop ran for


def simulate_loop(job):
    """toyserve's decode loop (what ``decode_loop`` names): vLLM's proposer, recorded."""
    from eagleconv.simulation.vllm import simulate_loop as vllm_loop

    RAN.append(job.engine)
    return vllm_loop(job)


TOYSERVE = dataclasses.replace(VLLM_032, engine="toyserve", version="1.0", summary="test-only: vLLM 0.32's reading",
                               decode_loop=__name__, server="vllm", rank=25, history=())
TOYCPP = dataclasses.replace(LLAMACPP_B11434, engine="toycpp", version="1", summary="test-only: llama.cpp's reading",
                             server=None, rank=60, history=())


@pytest.fixture(scope="module")
def plugin():
    """Both registered through the public ``register`` (toycpp kept out of ``all``, as llama.cpp is); all undone
    afterwards, so no other module sees them."""
    before = (list(engines.PROFILES), dict(engines.DEFAULTS), set(engines.NOT_IN_ALL))
    engines.register(TOYSERVE)
    engines.register(TOYCPP, in_all=False)
    yield
    for profile in (TOYSERVE, TOYCPP):
        del engines.PROFILES[profile.label], engines.DEFAULTS[profile.engine]
    engines.NOT_IN_ALL.discard(TOYCPP.engine)
    assert (list(engines.PROFILES), dict(engines.DEFAULTS), set(engines.NOT_IN_ALL)) == before  # as shipped again


def test_registered_from_here_it_is_listed_in_rank_order(plugin):
    assert engines.resolve_engines("toyserve") == [TOYSERVE] and engines.resolve_engines("toycpp:1") == [TOYCPP]
    all_ = [p.engine for p in engines.resolve_engines("all")]
    assert all_ == ["vllm", "sglang", "trtllm", "toyserve", "tokenspeed"]  # rank 25: after trtllm (20)
    assert list(engines.DEFAULTS)[0] == "vllm" and list(engines.DEFAULTS)[-1] == "toycpp"  # vllm stays the default
    findings = CliRunner().invoke(cli, ["findings"])
    assert findings.exit_code == 0 and "## toyserve 1.0" in findings.output and "## toycpp 1" in findings.output


def _errors(payload: dict) -> list[tuple[str, str, str]]:
    return sorted((f["code"], f["severity"], f["message"].replace("toyserve 1.0", "vllm 0.32"))
                  for f in payload["findings"])


def test_validate_with_engine_toyserve_says_what_vllm_says(plugin):
    def validate(*args: str) -> dict:
        result = CliRunner().invoke(cli, ["validate", *args, "--json"])
        assert result.exit_code in (0, 1), result.output
        return json.loads(result.output)

    for drafter in ("eagle3", "eagle31"):
        ours = validate(str(PAIR / drafter), "--engine", "toyserve")
        assert ours["engines"] == ["toyserve 1.0"]
        assert _errors(ours) == _errors(validate(str(PAIR / drafter), "--engine", "vllm:0.32"))
    assert "toyserve 1.0" in validate(str(PAIR / "eagle3"), "--engine", "all")["engines"]


def test_every_layouts_copy_is_judged_as_vllm_judges_it(plugin, tmp_path):
    from eagleconv.formats import LAYOUTS

    for layout in LAYOUTS:
        if LAYOUTS[layout].needs_target:
            continue
        out = tmp_path / layout
        eagleconv.convert(PAIR / "eagle3", out, layout)
        ours = eagleconv.validate(out, engines=("toyserve",))
        theirs = eagleconv.validate(out, engines=("vllm:0.32",))
        assert _errors(ours.model_dump()) == _errors(theirs.model_dump()), layout


def test_the_engine_contract_includes_it(plugin):
    from tests.engines import test_view

    assert TOYSERVE in engines.resolve_engines("all")
    test_view.test_every_engine_views_the_clean_drafter_as_it_means_it()  # the every-engine check, plugin included


def test_simulate_runs_the_loop_the_profile_names(plugin):
    pytest.importorskip("torch")
    from eagleconv.simulation import simulate

    same = ("tokens", "drafts", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")
    RAN.clear()
    toy = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=3, max_tokens=10,
                   engine="toyserve", threads=1).model_dump()
    assert RAN == ["toyserve"] and toy["engine"] == "toyserve"
    want = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=3, max_tokens=10,
                    engine="vllm:0.32", threads=1).model_dump()
    assert {k: toy[k] for k in same} == {k: want[k] for k in same}
    # named llama.cpp's loop, under another name: llama-server's counting (no trailing proposal, exactly n_predict)
    cpp = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=3, max_tokens=10,
                   engine="toycpp", threads=1).model_dump()
    real = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=3, max_tokens=10,
                    engine="llama.cpp", threads=1).model_dump()
    assert {k: cpp[k] for k in same} == {k: real[k] for k in same} and cpp["engine"] == "toycpp 1"
    assert cpp["drafts"] != want["drafts"] and RAN == ["toyserve"]


def test_measure_offers_it_and_reads_its_vllm_protocol_server(plugin, tmp_path):
    from tests.support.fake_server import FakeServer

    assert servers.measured_engines() == ("vllm", "toyserve", "llama.cpp")  # toycpp names no server protocol
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    srv = FakeServer().start()
    try:
        def measure(engine: str) -> dict:
            result = CliRunner().invoke(cli, ["measure", srv.url, "--prompts", str(prompts), "--max-tokens", "12",
                                              "--engine", engine, "--json"])
            assert result.exit_code == 0, result.output
            return json.loads(result.output)

        ours, theirs = measure("toyserve"), measure("vllm")
    finally:
        srv.stop()
    assert ours["engine"] == "toyserve" and theirs["engine"] == "vllm"
    counters = ("tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")
    assert {k: ours[k] for k in counters} == {k: theirs[k] for k in counters}
    refused = CliRunner().invoke(cli, ["measure", "http://127.0.0.1:9", "--prompts", str(prompts), "--engine",
                                       "toycpp"])
    assert refused.exit_code == 2 and "'toycpp' is not one of 'vllm', 'toyserve', 'llama.cpp'" in refused.output


def _named_files(text: str) -> set[str]:
    return set(re.findall(r"eagleconv/[\w/<>]+\.py", text))


# What the plugin above stands in for: its profile (registered from here), its loop (this module, named by
# decode_loop), and the server protocol it names (measure.servers.PROFILES).  Nothing else under eagleconv/.
RECIPE = {"eagleconv/engines/<engine>.py", "eagleconv/simulation/<loop>.py", "eagleconv/measurement/servers.py"}


def test_the_recipe_names_exactly_the_files_a_new_engine_touches():
    from eagleconv import simulation as simulate

    doc = engines.__doc__ or ""
    assert _named_files(doc) == RECIPE
    section = (REPO / "docs" / "architecture.md").read_text().split("## A new engine", 1)[1].split("\n#", 1)[0]
    assert _named_files(section) == RECIPE
    # each named place is where the registry looks: engine modules are discovered from engines/, a loop named
    # ``vllm`` is simulation/vllm.py, the protocols are servers.PROFILES
    package = Path(eagleconv.__file__).parent
    assert {p.stem for p in (package / "engines").glob("*.py")} >= {"vllm", "llamacpp", "sglang"}
    for profile in (VLLM_032, LLAMACPP_B11434):
        assert profile.decode_loop is not None and profile.server in servers.PROFILES
        loop = simulate.decode_loop(profile)
        assert Path(loop.__code__.co_filename) == package / "simulation" / f"{profile.decode_loop}.py"
    assert Path(servers.__file__) == package / "measurement" / "servers.py"
