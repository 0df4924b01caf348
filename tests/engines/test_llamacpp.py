"""The llama.cpp b11434 profile (validate/lint --engine llama.cpp) and simulate --engine llama.cpp.

The profile's findings on real checkpoints (the committed tiny pair, edited); the loop's rules on the tiny pair;
and, where a cached llama.cpp build and the SmolLM2 pair exist, simulate against real llama-speculative-simple.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import eagleconv
from eagleconv.engines import resolve_engines
from eagleconv.validation.parity import Variant, build_variant, outcome_of

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
PROMPTS = json.loads((PAIR / "prompts.json").read_text())


def findings(path: Path, target: Path = PAIR / "target"):
    return [f for f in eagleconv.validate(path, engines=("llama.cpp",), target=target, numeric=False).findings
            if f.engine == "llama.cpp b11434"]


def variant(tmp_path: Path, base: str, edit) -> Path:
    return build_variant(Variant("v", base, "test", edit), tmp_path)


def errors(found, effect=None):
    return {f.code for f in found if f.severity == "error" and (effect is None or f.effect == effect)}


def test_engine_names_resolve_to_the_b11434_profile():
    for name in ("llama.cpp", "llama.cpp:b11434", "LLAMA.CPP b11434", "llama.cpp==b11434"):
        assert [p.label for p in resolve_engines(name)] == ["llama.cpp b11434"]
    # named explicitly, like speculators: ``all`` stays the engines that serve EAGLE-3.1's fc_norm
    assert "llama.cpp b11434" not in [p.label for p in resolve_engines("all")]


def test_clean_eagle3_is_served_with_the_targets_embeddings():
    found = findings(PAIR / "eagle3")
    assert not errors(found) and outcome_of(found)[0] == "intended", [f.message for f in found]


def test_four_aux_layers_fail_at_load(tmp_path):
    path = variant(tmp_path, "eagle3", lambda c, t: c.update(eagle_aux_hidden_state_layer_ids=[0, 1, 2, 3]))
    found = findings(path)
    assert "EC011" in errors(found, "load_fails") and outcome_of(found)[0] == "fails"


def test_fc_norm_tensors_stop_llamas_converter(tmp_path):
    found = findings(PAIR / "eagle31")
    assert "EC021" in errors(found, "load_fails") and "EC022" in errors(found)
    assert outcome_of(found)[0] == "fails"


def test_aux_ids_only_nested_are_guessed(tmp_path):
    path = variant(tmp_path, "eagle3", lambda c, t: c.pop("eagle_aux_hidden_state_layer_ids"))
    found = findings(path)
    # the guess [2, 4//2, 4-3] = [2, 2, 1] is not what the drafter was trained on ([1, 2, 3])
    assert any(f.code == "EC010" and f.effect == "runs_differently" and "[2, 2, 1]" in f.message for f in found)
    assert outcome_of(found)[0] == "differs" and not errors(found), [f.message for f in found]


def test_aux_ids_only_nested_equal_to_the_guess_are_harmless(tmp_path):
    """SmolLM2's 30 layers: the guess [2, 15, 27] is what the eagle3 drafter was trained on."""
    def edit(c, t):
        c.pop("eagle_aux_hidden_state_layer_ids")
        c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 2, 1]
    found = findings(variant(tmp_path, "eagle3", edit))
    assert any(f.code == "EC010" and f.severity == "info" for f in found)


def test_id_past_the_last_layer_aborts(tmp_path):
    path = variant(tmp_path, "eagle3", lambda c, t: c.update(eagle_aux_hidden_state_layer_ids=[1, 2, 5]))
    assert "EC013" in errors(findings(path), "load_fails")


def test_d2t_missing_with_a_pruned_lm_head_fails(tmp_path):
    path = variant(tmp_path, "eagle3", lambda c, t: t.pop("d2t"))
    found = findings(path)
    assert any(f.code == "EC050" and f.tensor == "lm_head.weight" and f.effect == "load_fails" for f in found)


def test_lm_head_missing_with_d2t_aborts(tmp_path):
    path = variant(tmp_path, "eagle3", lambda c, t: t.pop("lm_head.weight"))
    found = findings(path)
    assert any(f.code == "EC050" and f.tensor == "d2t" and f.effect == "load_fails" for f in found)


def test_wrong_target_hidden_size_fails_on_fc(tmp_path):
    path = variant(tmp_path, "eagle3", lambda c, t: c.update(target_hidden_size=512))
    found = findings(path)
    assert any(f.code == "EC050" and f.tensor == "fc.weight" and f.effect == "load_fails" for f in found)


def test_missing_required_norm_fails_where_vllm_keeps_unit_weights(tmp_path):
    path = variant(tmp_path, "eagle3", lambda c, t: t.pop("layers.0.hidden_norm.weight"))
    found = findings(path)
    assert any(f.code == "EC003" and f.effect == "load_fails" and "missing" in f.message for f in found)
    vllm = eagleconv.validate(path, engines=("vllm:0.32",), target=PAIR / "target", numeric=False).findings
    assert outcome_of(vllm)[0] != "fails"


def test_lint_names_what_llamacpp_has_no_switch_for(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads((PAIR / "eagle31" / "config.json").read_text())}))
    report = eagleconv.lint(config, engines=("llama.cpp",))
    msgs = [f.message for f in report.findings if f.code == "EC022" and f.severity == "error"]
    assert any("fc_norm" in m for m in msgs) and any("norm_output" in m for m in msgs)


# -- simulate --engine llama.cpp ---------------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def sim():
    from eagleconv.simulation import simulate
    return simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:2], num_speculative_tokens=3, max_tokens=16,
                    engine="llama.cpp", llamacpp_loop="simple")


def test_counters_are_llamacpps(sim):
    assert sim.engine == "llama.cpp b11434"
    assert sim.num_draft_tokens == sum(len(d) for p in sim.drafts for d in p)
    for n, tokens in zip(sim.num_generated, sim.tokens):
        # the loop ends once more than -n tokens were emitted (or at an end-of-generation token)
        assert n > 16 or 2 in tokens
    # a draft is cut to the tokens still wanted only while that number is positive
    assert all(len(d) <= 3 for p in sim.drafts for d in p)


def test_p_min_one_drafts_nothing_and_emits_the_same_tokens(sim):
    from eagleconv.simulation import simulate
    none = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:2], num_speculative_tokens=3, max_tokens=16,
                    engine="llama.cpp", p_min=1.0, llamacpp_loop="simple")
    assert none.num_draft_tokens == 0 and none.num_accepted_tokens == 0
    assert [t[:17] for t in none.tokens] == [t[:17] for t in sim.tokens]


def test_first_draft_is_made_from_the_prompts_last_token(sim):
    """llama.cpp drafts before the target samples anything: round 0's first draft predicts the first output."""
    from eagleconv.simulation import simulate
    vllm = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:2], num_speculative_tokens=3, max_tokens=16)
    assert [p[0][0] for p in sim.drafts] != [p[0][0] for p in vllm.drafts] or \
        [p[0][0] for p in sim.drafts] == [t[0] for t in sim.tokens]


def test_a_one_token_prompt_verifies_an_empty_draft_first():
    """With nothing to prefill, llama-speculative-simple has no target features to draft from: its first round
    verifies an empty draft ("decode: n_tokens == 0", then "accepted 0/0" in b11434's log), after which it stands
    where llama-server stands after the prompt: the first sampled token, the prompt's features."""
    from eagleconv.simulation import simulate
    one = [[PROMPTS[0][0]]]
    simple = simulate(PAIR / "eagle3", PAIR / "target", one, num_speculative_tokens=3, max_tokens=16,
                      engine="llama.cpp", llamacpp_loop="simple")
    srv = simulate(PAIR / "eagle3", PAIR / "target", one, num_speculative_tokens=3, max_tokens=16, engine="llama.cpp")
    assert simple.drafts[0][0] == [] and simple.tokens[0][0] == srv.tokens[0][0]
    assert simple.drafts[0][1:4] == srv.drafts[0][:3] and any(simple.drafts[0][1:4])
    assert simple.num_draft_tokens == sum(len(d) for d in simple.drafts[0])


@pytest.fixture(scope="module")
def server():
    from eagleconv.simulation import simulate
    return simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=3, max_tokens=16,
                    engine="llama.cpp")


def test_server_loop_is_the_default_and_emits_exactly_n_predict(server, sim):
    """llama-server stops once n_gen reaches n_predict; llama-speculative-simple runs past -n."""
    assert server.num_generated == [len(t) for t in server.tokens] == [16] * len(PROMPTS)
    assert all(n > 16 for n in sim.num_generated)
    assert any("llama-server's loop" in n for n in server.notes)


def test_server_loop_samples_the_first_token_from_the_prompt_as_vllm(server):
    """The prompt is evaluated whole and its token sampled first: the tokens are the target's greedy stream, as
    vLLM's (greedy speculative decoding never changes them), not shifted by a draft made before it."""
    from eagleconv.simulation import simulate
    vllm = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=3, max_tokens=16)
    assert server.tokens == vllm.tokens
    assert [p[0] for p in server.drafts] == [p[0] for p in vllm.drafts]  # the same first proposal


def test_server_loop_cuts_each_draft_to_the_tokens_left(server):
    """n_draft_max = n_remaining - 1: a draft never reaches past n_predict, and none is made for the last token."""
    for out, drafts in zip(server.tokens, server.drafts):
        assert drafts[-1] == []  # the step after the last round drafted nothing
        cursor = 1
        for draft in drafts[:-1]:
            assert 1 <= len(draft) <= min(3, 16 - cursor - 1)
            accepted = next((i for i, (a, b) in enumerate(zip(draft, out[cursor:])) if a != b), len(draft))
            cursor += accepted + 1
        assert cursor in (16, 15)  # ended by the last round, or one plain decode after it
    assert any(0 < len(d) < 3 for p in server.drafts for d in p)  # the tiny pair does reach a cut draft
    assert server.num_draft_tokens == sum(len(d) for p in server.drafts for d in p)
    assert server.num_drafts == sum(len(p) - 1 for p in server.drafts)


def test_server_report_is_what_measure_against_rebuilds(server, tmp_path):
    """measure --against rebuilds the rounds from a simulate report: for the server loop its counters must come out
    as the loop counted them (cut drafts included), or the CI comparison with llama-server would be meaningless."""
    from eagleconv.measurement.against import load_reference

    path = tmp_path / "sim.json"
    path.write_text(server.model_dump_json())
    ref = load_reference(path, len(PROMPTS))
    assert sum(p.num_drafts or 0 for p in ref.prompts) == server.num_drafts
    assert sum(p.accepted or 0 for p in ref.prompts) == server.num_accepted_tokens
    assert [sum(x) for x in zip(*(p.per_pos or [] for p in ref.prompts))] == server.accepted_per_position
    assert all(p.num_drafts is not None and p.per_pos is not None for p in ref.prompts)


def test_an_unknown_loop_is_refused():
    from eagleconv.simulation import SimulateError, simulate
    with pytest.raises(SimulateError, match="--llamacpp-loop spin"):
        simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:1], max_tokens=4, engine="llama.cpp",
                 llamacpp_loop="spin")


def test_llamacpp_cannot_serve_is_refused(tmp_path):
    from eagleconv.simulation import SimulateError, simulate
    with pytest.raises(SimulateError, match="llama.cpp b11434 cannot serve it"):
        simulate(PAIR / "eagle31", PAIR / "target", PROMPTS[:1], max_tokens=4, engine="llama.cpp")


# -- real llama.cpp ----------------------------------------------------------------------------

from tests.support.ci_cache import llamacpp_build as _build, smollm2_pair as _smollm2  # noqa: E402


@pytest.mark.skipif(_build() is None, reason="no cached llama.cpp b11434 build (.ci/llamacpp-env builds it, ~35 min)")
@pytest.mark.skipif(_smollm2() is None, reason="no SmolLM2 pair (.ci/smollm2 builds it)")
def test_simulate_equals_real_llama_speculative_simple(tmp_path):
    """eagle3 on SmolLM2's F32 GGUF: every draft, every emitted token and the counters, as llama.cpp printed them."""
    build, pair = _build(), _smollm2()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / ".ci" / "llamacpp_parity.py"), "--build", str(build),
                           "--pair", str(pair), "--work", str(tmp_path), "--only", "eagle3", "--max-tokens", "16"],
                          capture_output=True, text=True, env=env, timeout=3000)
    report = json.loads((tmp_path / "llamacpp-parity.json").read_text())
    base = report["outcomes"]["eagle3"]
    assert base["observed"] == "intended" and base["simulate"]["differences"] == [], proc.stdout[-2000:]


def test_trace_parser_reads_llama_speculative_simples_log():
    """Lines as llama.cpp b11434 prints them with -v (a wrapped newline piece included): drafts, acceptance, counters."""
    sys.path.insert(0, str(REPO / ".ci"))
    from llamacpp_trace import parse

    log = """0.02.437.567 D spec        draft:  - seq_id 0, draft candidate   0, pos   0:    198 (   1.000) '
'
0.02.437.620 D spec        draft:  - seq_id 0, draft candidate   1, pos   0:   1116 (   0.000) ' '
0.02.449.051 D spec        draft:  - seq_id 0, draft candidate   0, pos   1:   3725 (   0.729) '```'
0.02.449.103 D spec        draft:  - seq_id 0, draft candidate   1, pos   1:     57 (   0.184) 'I'
0.02.451.464 D spec        draft:  - seq_id 0, draft candidate   0, pos   2:    198 (   0.600) '
'
0.02.645.809 D accepted 1/2 draft tokens, the last target token is: (3725)
0.03.095.909 D accepted 0/0 draft tokens, the last target token is: (38)
0.35.059.977 I n_predict = 3
0.35.059.982 I n_drafted = 2
0.35.059.987 I n_accept  = 1
"""
    trace = parse(log)
    assert [r["draft"] for r in trace["rounds"]] == [[198, 3725], []]
    assert [r["emitted"] for r in trace["rounds"]] == [[198, 3725], [38]]
    assert trace["rounds"][0]["top2"][1] == [3725, 0.729, 57, 0.184]
    assert (trace["n_predict"], trace["n_drafted"], trace["n_accept"]) == (3, 2, 1)


@pytest.mark.skipif(_build() is None, reason="no cached llama.cpp b11434 build (.ci/llamacpp-env builds it, ~35 min)")
@pytest.mark.skipif(_smollm2() is None, reason="no SmolLM2 pair (.ci/smollm2 builds it)")
def test_one_token_prompt_equals_real_llama_speculative_simple(tmp_path):
    """The empty first round, checked against the binary: every draft, every emitted token and the counters."""
    from tokenizers import Tokenizer

    sys.path.insert(0, str(REPO / ".ci"))
    from llamacpp_parity import compare, simulate_case, speculative_simple, their_gguf

    build, pair = _build(), _smollm2()
    assert build is not None and pair is not None
    text = "Once"
    prompt = Tokenizer.from_file(str(pair / "target" / "tokenizer.json")).encode(text).ids
    assert len(prompt) == 1, prompt
    target = pair / "llamacpp-target-f32.gguf"  # written by .ci/llamacpp-parity; made here when absent
    if not target.exists():
        target, err = their_gguf(build, pair / "target", pair / "target", tmp_path / "target.gguf")
        assert target is not None, err
    draft = tmp_path / "eagle3.gguf"
    eagleconv.convert(pair / "eagle3", draft, "gguf", target=pair / "target", outtype="f32")
    trace = speculative_simple(build, target, draft, text, 8, tmp_path)
    assert "error" not in trace and trace["rounds"][0]["draft"] == [], trace
    assert compare(simulate_case(pair / "eagle3", pair / "target", [prompt], 8), [trace]) == []
