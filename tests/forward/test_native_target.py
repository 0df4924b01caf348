"""eagleconv's own target forward (simulate's default runtime) against transformers on the same weights.

Targets are the committed tiny pair's and seeded tiny Llama/Qwen3 models written by transformers itself
(``save_pretrained``), covering GQA, q_norm/k_norm, attention biases, tied embeddings and scaled RoPE.  What vLLM
computes with the tiny pair is checked by the parity tier, with both runtimes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from eagleconv.cli.main import cli  # noqa: E402
from eagleconv.errors import UsageError  # noqa: E402
from eagleconv.forward.inputs import Target  # noqa: E402
from eagleconv.forward.native_target import open_target  # noqa: E402
from eagleconv.forward.native_target import NativeTarget, NativeUnsupported  # noqa: E402

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"
PROMPTS = json.loads((PAIR / "prompts.json").read_text())


def rope(**parameters: object) -> dict:
    """Config keys stating these rope parameters in the installed transformers' spelling: 5.x reads
    ``rope_parameters`` (theta inside), 4.x ignores it and reads ``rope_theta`` plus ``rope_scaling``."""
    if int(transformers.__version__.split(".")[0]) >= 5:
        return {"rope_parameters": parameters}
    theta = parameters.pop("rope_theta")
    return {"rope_theta": theta, "rope_scaling": parameters}


SMALL = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, initializer_range=0.2)
MODELS = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "llama-bias-tied-llama3-rope": ("LlamaConfig", "LlamaForCausalLM", dict(
        attention_bias=True, tie_word_embeddings=True,
        **rope(rope_type="llama3", rope_theta=50000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=16))),
    "llama-linear-rope-mha": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_key_value_heads=4, **rope(rope_type="linear", rope_theta=10000.0, factor=4.0))),
}


def tiny_target(tmp_path: Path, kind: str, seed: int = 0) -> Path:
    config_cls, model_cls, extra = MODELS[kind]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**{**SMALL, **extra}))
    with torch.no_grad():  # norm weights away from 1 and biases away from 0, so a skipped one shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.3)
    out = tmp_path / kind
    model.save_pretrained(out)
    return out


def assert_same_target(native: NativeTarget, reference: Target, sequences: list[list[int]]) -> None:
    """Every captured state close, and the same greedy token wherever the reference's top two are apart."""
    ids = list(range(reference.num_layers + 1))
    for seq in sequences:
        greedy_n, states_n = native.forward(seq, ids)
        greedy_r, states_r = reference.forward(seq, ids)
        for i in ids:
            torch.testing.assert_close(states_n[i], states_r[i], rtol=2e-5, atol=2e-5, msg=f"aux id {i}")
        with torch.no_grad():
            logits = reference.model(torch.tensor([seq])).logits[0]
        top2 = logits.topk(2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 1e-4
        assert clear.float().mean() > 0.9, "the check needs clear greedy choices"
        assert torch.equal(greedy_n[clear], greedy_r[clear])


def test_tiny_pair_target_matches_transformers():
    native, reference = NativeTarget(PAIR / "target"), Target(PAIR / "target")
    long = [(7 * i + 3) % native.vocab_size for i in range(120)]
    assert_same_target(native, reference, PROMPTS + [long])
    assert torch.equal(native.embed, reference.embed) and torch.equal(native.lm_head, reference.lm_head)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_transformers_written_targets_match(tmp_path, kind):
    path = tiny_target(tmp_path, kind)
    target = open_target(path)
    assert target.runtime == "eagleconv", getattr(target, "fallback", None)
    assert_same_target(target, Target(path), [[1, 5, 9, 200, 17, 3, 3, 42], list(range(40, 80))])


def test_tied_embeddings_with_a_different_stored_lm_head_run_in_transformers(tmp_path):
    """transformers 5 keeps a stored lm_head that differs from the tied embedding, vLLM ties: ambiguous, so auto
    leaves it to transformers (what simulate documents) rather than picking one."""
    from safetensors.torch import load_file, save_file

    path = tiny_target(tmp_path, "llama-bias-tied-llama3-rope")
    tensors = load_file(path / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    assert open_target(path).runtime == "eagleconv"  # equal to the embedding: no ambiguity
    tensors["lm_head.weight"] = torch.randn_like(tensors["model.embed_tokens.weight"])
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(NativeUnsupported, match="differs from the embedding"):
        NativeTarget(path)
    target = open_target(path)
    assert target.runtime == "transformers" and "differs from the embedding" in target.fallback


def test_run_keeps_targets_interface():
    native, reference = NativeTarget(PAIR / "target"), Target(PAIR / "target")
    (sn, tn), (sr, tr) = native.run(PROMPTS[0], [1, 2]), reference.run(PROMPTS[0], [1, 2])
    assert tn == tr and sn.keys() == sr.keys() == {1, 2}
    for t in (native, reference):
        with pytest.raises(UsageError, match="outside the target's 0..4"):
            t.run(PROMPTS[0], [5])
        with pytest.raises(UsageError, match="prompt token 512 is outside the target vocabulary"):
            t.run([1, 512], [1])


def _edit(path: Path, config: dict | None = None, drop: str | None = None, add: str | None = None) -> Path:
    from safetensors.torch import load_file, save_file

    if config is not None:
        cfg = json.loads((path / "config.json").read_text())
        cfg.update(config)
        (path / "config.json").write_text(json.dumps(cfg))
    if drop or add:
        tensors = load_file(path / "model.safetensors")
        if drop:
            del tensors[drop]
        if add:
            tensors[add] = torch.ones(64)
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path


@pytest.mark.parametrize("change,reason", [
    (dict(config={"mlp_bias": True}), "mlp_bias = True"),
    (dict(config={"hidden_act": "gelu"}), "hidden_act = 'gelu'"),
    (dict(config={"use_sliding_window": True, "sliding_window": 8}), "use_sliding_window = True"),
    (dict(config={"model_type": "mistral", "architectures": ["MistralForCausalLM"]}), "runs only"),
    (dict(config={"some_new_field": 3}), "config fields eagleconv does not model: some_new_field"),
    (dict(config=rope(rope_type="yarn", rope_theta=1e4, factor=2.0, attention_factor=1.2)), "rope"),
    (dict(drop="model.layers.1.self_attn.q_norm.weight"), "missing: layers.1.self_attn.q_norm.weight"),
    (dict(add="model.layers.0.extra_norm.weight"), "unread tensors: layers.0.extra_norm.weight"),
    (dict(add="model.layers.2.self_attn.o_proj.bias"), "unread tensors: layers.2.self_attn.o_proj.bias"),
])
def test_what_eagleconv_does_not_run_falls_back_to_transformers(tmp_path, change, reason):
    path = _edit(tiny_target(tmp_path, "qwen3"), **change)
    with pytest.raises(NativeUnsupported, match=reason.replace("(", r"\(").replace(")", r"\)")):
        NativeTarget(path)
    if "model_type" not in change.get("config", {}) and "hidden_act" not in change.get("config", {}):
        target = open_target(path, "auto")
        assert target.runtime == "transformers" and reason.split(" ")[0] in target.fallback
    with pytest.raises(UsageError, match="--target-runtime transformers"):
        open_target(path, "eagleconv")


def test_simulate_cli_reports_the_runtime_and_both_agree():
    args = ["simulate", str(PAIR / "eagle31"), "--target", str(PAIR / "target"), "--prompts",
            str(PAIR / "prompts.json"), "--max-tokens", "12", "--json"]
    runner = CliRunner()
    auto = runner.invoke(cli, args)
    forced = runner.invoke(cli, args + ["--target-runtime", "transformers"])
    assert auto.exit_code == 0 and forced.exit_code == 0, auto.output + forced.output
    a, b = json.loads(auto.output), json.loads(forced.output)
    assert (a["target_runtime"], b["target_runtime"]) == ("eagleconv", "transformers")
    same = ("tokens", "drafts", "num_drafts", "num_accepted_tokens", "accepted_per_position")
    assert {k: a[k] for k in same} == {k: b[k] for k in same}


def test_simulate_cli_refuses_a_forced_runtime_it_cannot_run(tmp_path):
    path = _edit(tiny_target(tmp_path, "qwen3"), config={"mlp_bias": True})
    result = CliRunner().invoke(cli, ["simulate", str(PAIR / "eagle3"), "--target", str(path),
                                      "--target-runtime", "eagleconv"])
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.startswith("eagleconv: error:") and "mlp_bias" in line and "\n" not in line and "Traceback" not in line


# The keys SmolLM2-135M-Instruct's published config.json carries beyond transformers' own (nanotron's
# is_llama_config and rope_interleaved, transformers.js's block), with what a transformers dump of it adds.
SMOLLM2_PUBLISHED = {"is_llama_config": True, "rope_interleaved": False, "pretraining_tp": 1, "use_cache": True,
                     "transformers_version": "4.42.3", "pad_token_id": 2, "unk_token_id": 0,
                     "initializer_range": 0.041666666666666664, "attention_dropout": 0.0, "rope_scaling": None,
                     "_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
                     "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}}}


def test_published_llama_config_fields_run_natively(tmp_path):
    """A real target's published config runs in eagleconv's runtime (issue 15: SmolLM2 fell back to the slowest
    path), and the fields really are inert: the states still equal transformers'."""
    path = _edit(tiny_target(tmp_path, "llama-linear-rope-mha"), config=SMOLLM2_PUBLISHED)
    target = open_target(path, "auto")
    assert target.runtime == "eagleconv", getattr(target, "fallback", None)
    assert_same_target(target, Target(path), [[1, 5, 9, 200, 17, 3, 3, 42]])


@pytest.mark.parametrize("key,value", [("rope_interleaved", True), ("pretraining_tp", 2),
                                       ("attention_dropout", 0.1)])
def test_published_fields_at_math_changing_values_are_refused(tmp_path, key, value):
    path = _edit(tiny_target(tmp_path, "llama-linear-rope-mha"), config={**SMOLLM2_PUBLISHED, key: value})
    with pytest.raises(NativeUnsupported, match=f"{key} = {value!r}"):
        NativeTarget(path)
