"""simulate on the committed tiny pair: real target, real trained drafters, vLLM's proposer semantics.

What vLLM itself does with the same inputs is checked by the parity tier (.ci/vllm-parity, tests/engines/test_vllm_parity.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from eagleconv.cli.main import cli  # noqa: E402
from eagleconv.simulation import SimulateError, simulate  # noqa: E402

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"
PROMPTS = json.loads((PAIR / "prompts.json").read_text())


def plain_greedy(prompt: list[int], n: int) -> list[int]:
    from eagleconv.forward.inputs import _dtype_kwarg  # dtype from transformers 4.56, torch_dtype before

    model = transformers.AutoModelForCausalLM.from_pretrained(str(PAIR / "target"), **_dtype_kwarg(torch.float32)).eval()
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt):]


@pytest.fixture(scope="module")
def eagle3():
    return simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=3, max_tokens=32)


def test_tokens_are_the_targets_plain_greedy_output(eagle3):
    assert eagle3.tokens[0] == plain_greedy(PROMPTS[0], 32)
    assert all(len(t) == 32 for t in eagle3.tokens)


def test_counters_mean_what_vllms_mean(eagle3):
    K = 3
    assert eagle3.num_draft_tokens == K * eagle3.num_drafts
    assert eagle3.num_accepted_tokens == sum(eagle3.accepted_per_position)
    assert all(a >= b for a, b in zip(eagle3.accepted_per_position, eagle3.accepted_per_position[1:]))
    assert eagle3.acceptance_length == pytest.approx(1 + eagle3.num_accepted_tokens / eagle3.num_drafts)
    # every round emits accepted + 1 tokens; the last round may overshoot max_tokens and is cut
    assert eagle3.num_accepted_tokens + eagle3.num_drafts + len(PROMPTS) >= 32 * len(PROMPTS)
    # one proposal after the prefill and after every verification round, K tokens each
    assert sum(len(d) for d in eagle3.drafts) == eagle3.num_drafts + len(PROMPTS)
    assert all(len(r) == K for d in eagle3.drafts for r in d)


def test_trained_drafter_is_accepted_at_position_0(eagle3):
    assert eagle3.accepted_per_position[0] / eagle3.num_drafts >= 0.3


def test_a_broken_drafter_changes_only_the_counters(eagle3, tmp_path):
    from eagleconv.validation.parity import VARIANTS, build_variant

    variant = next(v for v in VARIANTS if v.name == "d2t missing")
    broken = simulate(build_variant(variant, tmp_path), PAIR / "target", PROMPTS)
    assert broken.tokens == eagle3.tokens
    assert broken.num_accepted_tokens < eagle3.num_accepted_tokens
    assert any("d2t missing" in n for n in broken.notes)


def test_layouts_draft_identically(eagle3, tmp_path):
    from eagleconv.conversion import convert

    convert(PAIR / "eagle3", tmp_path / "spec", "speculators")
    other = simulate(tmp_path / "spec", PAIR / "target", PROMPTS)
    assert other.drafts == eagle3.drafts and other.num_accepted_tokens == eagle3.num_accepted_tokens


def test_vllm_load_failure_is_reported_not_simulated(tmp_path):
    from eagleconv.validation.parity import VARIANTS, build_variant

    variant = next(v for v in VARIANTS if v.name == "model.-prefixed keys")
    with pytest.raises(SimulateError, match="fails at load"):
        simulate(build_variant(variant, tmp_path), PAIR / "target", PROMPTS)


def test_cli_json_and_table(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["simulate", str(PAIR / "eagle31"), "--target", str(PAIR / "target"), "--prompts",
                              str(PAIR / "prompts.json"), "--max-tokens", "8", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{"):])
    assert set(data) >= {"tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position",
                         "acceptance_length", "drafts"}
    assert all(len(t) == 8 for t in data["tokens"])
    res = runner.invoke(cli, ["simulate", str(PAIR / "eagle31"), "--target", str(PAIR / "target"), "--max-tokens", "4"])
    assert res.exit_code == 0 and "position" in res.output and "█" in res.output


def test_prompts_as_lists_as_a_file_or_built_in(tmp_path):
    """A prompts file is read by the reader every --prompts uses (tests/forward/test_prompts.py: the CLI), lists given in
    the library get the same rules, and without prompts the built-in ones run."""
    from eagleconv.errors import FormatError
    from eagleconv.simulation import DEFAULT_PROMPTS

    file = tmp_path / "prompts.json"
    file.write_text(json.dumps(PROMPTS[:1]))
    # threads fixed: by default each run picks its threads from the load it sees, and says so in a note
    from_file = simulate(PAIR / "eagle3", PAIR / "target", file, max_tokens=4, threads=1)
    assert from_file == simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:1], max_tokens=4, threads=1)
    with pytest.raises(FormatError, match="prompt 0: -1 is not a token id"):
        simulate(PAIR / "eagle3", PAIR / "target", [[1, -1]])
    with pytest.raises(FormatError, match=r"prompt 1: token 512 is outside the target's vocabulary \(0..511\)"):
        simulate(PAIR / "eagle3", PAIR / "target", [[1], (2, 512)])
    built_in = simulate(PAIR / "eagle3", PAIR / "target", max_tokens=2)
    assert len(built_in.tokens) == len(DEFAULT_PROMPTS) and all(len(t) == 2 for t in built_in.tokens)


def test_a_missing_norm_runs_with_the_engines_unit_weights(tmp_path):
    """vLLM loads an fc_norm drafter without its fc_norm tensors (weights stay 1.0): the engine view runs it."""
    from eagleconv.engines import resolve_engines
    from eagleconv.engines.view import view_drafter
    from eagleconv.readers.loading import load_drafter
    from eagleconv.validation.parity import VARIANTS, build_variant

    variant = next(v for v in VARIANTS if v.name == "fc_norm flag without the tensors")
    path = build_variant(variant, tmp_path)
    loaded = load_drafter(path)
    loaded.store.close()
    view = view_drafter(resolve_engines(["vllm:0.32"])[0], loaded, (1, 2, 3), 4)
    assert view.report.runs and view.report.reason is None and view.spec is not None and view.spec.flags.fc_norm
    assert view.layers == (1, 2, 3) and {n: f.kind for n, f in view.fills.items()} == {
        f"fc_norm.{i}.weight": "unit_norm" for i in range(3)}
    rejected = next(v for v in VARIANTS if v.name == "fc_norm tensors without the flag")  # this one the loader raises on
    loaded = load_drafter(build_variant(rejected, tmp_path))
    loaded.store.close()
    view = view_drafter(resolve_engines(["vllm:0.32"])[0], loaded, (1, 2, 3), 4)
    assert not view.report.runs and "raises" in (view.report.reason or "")
    broken = simulate(path, PAIR / "target", PROMPTS)  # vLLM drafts differently here too (the recorded outcome)
    intended = simulate(PAIR / "eagle31", PAIR / "target", PROMPTS)
    assert broken.tokens == intended.tokens and broken.drafts != intended.drafts
    assert [n for n in broken.notes if "missing" in n] == [
        f"fc_norm.{i}.weight missing: vLLM keeps its initial weight 1.0, and so does simulate" for i in range(3)]


def test_runs_rope_scaling_through_the_reference_forward(eagle3, tmp_path):
    """simulate used to refuse anything but default RoPE; the reference forward's llama3 scaling now runs it."""
    import shutil

    d = tmp_path / "eagle3-llama3-rope"
    shutil.copytree(PAIR / "eagle3", d)
    config = json.loads((d / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 16}
    (d / "config.json").write_text(json.dumps(config))
    scaled = simulate(d, PAIR / "target", PROMPTS)
    assert scaled.tokens == eagle3.tokens  # the target's greedy output whatever the drafter
    assert scaled.drafts != eagle3.drafts  # positions past 16 rotate differently: the drafter sees it


def test_target_is_loaded_from_safetensors_only(tmp_path):
    """A target holding only a pickle (pytorch_model.bin) is refused, one line naming it, as validate --forward does."""
    from safetensors.torch import load_file

    target = tmp_path / "pickled-target"
    target.mkdir()
    (target / "config.json").write_bytes((PAIR / "target" / "config.json").read_bytes())
    torch.save(load_file(str(PAIR / "target" / "model.safetensors")), target / "pytorch_model.bin")
    res = CliRunner().invoke(cli, ["simulate", str(PAIR / "eagle3"), "--target", str(target), "--max-tokens", "2"])
    assert res.exit_code == 2, res.output
    assert str(target) in res.output and "Traceback" not in res.output
