"""simulate at real-model speed (issue 15): KV caches across rounds, all prompts verified in one pass per step,
threads, ``--device``, and the published config fields the native target runtime accepts.

The cached, batched path must draft and generate exactly what the plain definition does (``kv_cache=False``:
the target re-run over the whole sequence and the drafter's first pass over every verified row, prompt by
prompt), and the counters must stay those real vLLM 0.32 recorded (fixtures/tiny-pair/vllm-0.32.0-outcomes.json).
"""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from eagleconv.cli.main import cli  # noqa: E402
from eagleconv.forward.kv_cache import Segment, SlotCache, target_step  # noqa: E402
from eagleconv.forward.native_target import NativeTarget, NativeUnsupported  # noqa: E402
from eagleconv.validation.parity import VARIANTS, build_variant  # noqa: E402
from eagleconv.simulation import SimulateError, available_threads, engine_drafter, simulate  # noqa: E402
from eagleconv.synthetic import DrafterRecipe, TinyDims, make_drafter  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
PROMPTS = json.loads((PAIR / "prompts.json").read_text())
RECORD = json.loads((PAIR / "vllm-0.32.0-outcomes.json").read_text())
SAME = ("tokens", "drafts", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")


def both_paths(drafter: Path, target: Path, prompts, **kw) -> tuple[dict, dict]:
    cached = simulate(drafter, target, prompts, kv_cache=True, **kw).model_dump()
    full = simulate(drafter, target, prompts, kv_cache=False, **kw).model_dump()
    return {k: cached[k] for k in SAME}, {k: full[k] for k in SAME}


@pytest.mark.parametrize("drafter", ["eagle3", "eagle31"])
@pytest.mark.parametrize("k,max_tokens", [(3, 32), (1, 9), (5, 20)])
def test_cached_batched_path_equals_the_full_rerun_on_the_tiny_pair(drafter, k, max_tokens):
    cached, full = both_paths(PAIR / drafter, PAIR / "target", PROMPTS, num_speculative_tokens=k,
                              max_tokens=max_tokens)
    assert cached == full


# Every parity variant vLLM ran with a defined result: the cached path's counters are the ones vLLM recorded.
LOADED = [v for v in VARIANTS if RECORD["outcomes"][v.name]["observed"] != "fails" and not v.undefined]


@pytest.mark.parametrize("variant", LOADED, ids=lambda v: v.name)
def test_cached_counters_equal_what_real_vllm_recorded(variant, tmp_path):
    path = build_variant(variant, tmp_path)
    report = simulate(path, PAIR / "target", PROMPTS, num_speculative_tokens=RECORD["num_speculative_tokens"],
                      max_tokens=RECORD["max_tokens"])
    assert report.target_runtime == "eagleconv"
    vllm = RECORD["outcomes"][variant.name]["vllm"]
    assert {k: getattr(report, k) for k in COUNTERS} == {k: vllm[k] for k in COUNTERS}


SMALL = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, initializer_range=0.2, rope_theta=10000.0)


def seeded_pair(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A seeded Llama/Qwen3 target written by transformers and a seeded drafter of its width that drafts varied
    tokens (so every round's drafts depend on the whole cached context)."""
    config_cls, model_cls = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
                             "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}[kind]
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**SMALL))
    model.save_pretrained(tmp_path / f"target-{kind}")
    dims = TinyDims(hidden=64, target_hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=300,
                    draft_vocab=100, aux_ids=(0, 1, 3), target_layers=3)
    drafter = make_drafter(tmp_path / f"eagle3-{kind}", DrafterRecipe(producer="vllm", architecture=kind,
                                                                      dims=dims, dtype="float32", seed=3))
    return drafter, tmp_path / f"target-{kind}"


RAGGED = [[1, 17, 42, 99, 7, 30, 200, 5, 5, 64], [1, 250], [1, 4, 9, 16, 25, 36], [7]]


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_cached_path_equals_the_full_rerun_on_seeded_targets_with_ragged_prompts(kind, tmp_path):
    drafter, target = seeded_pair(tmp_path, kind)
    cached, full = both_paths(drafter, target, RAGGED, num_speculative_tokens=3, max_tokens=24)
    assert len({tuple(d) for row in full["drafts"] for d in row}) > 10  # the drafts vary: the test can tell
    assert cached == full


def test_a_batched_step_computes_each_prompts_rows_as_the_full_forward(tmp_path):
    """Ragged rows of three prompts in one pass, appended to their caches: the same states and greedy tokens
    as NativeTarget.forward over each whole sequence."""
    _, path = seeded_pair(tmp_path, "qwen3")
    target = NativeTarget(path)
    ids = [0, 2, 3]
    caches = [SlotCache(target.num_layers) for _ in RAGGED[:3]]
    with torch.no_grad():
        target_step(target, [Segment(c, p[:-2], 0) for c, p in zip(caches, RAGGED[:3])], ids)
        outs = target_step(target, [Segment(c, p[-2:], len(p) - 2) for c, p in zip(caches, RAGGED[:3])], ids)
        for prompt, (greedy, states) in zip(RAGGED[:3], outs):
            full_greedy, full_states = target.forward(prompt, ids)
            assert torch.equal(greedy, full_greedy[-2:])
            torch.testing.assert_close(states, torch.cat([full_states[i][-2:] for i in ids], -1),
                                       rtol=1e-5, atol=1e-5)


def test_caches_sharing_one_block_attend_together_and_a_grown_one_leaves_it(tmp_path, monkeypatch):
    """SlotCache.batch: steps whose segments all have the same rows attend in one product against the shared
    block (a subset of its rows too, as when prompts finish); a cache written past its capacity leaves the block.
    Every step's states and greedy tokens are those of NativeTarget.forward over the whole sequence."""
    from eagleconv.forward import kv_cache

    batch_rows: list[int] = []  # per attention call of target_step: how many segments it covers

    def spy(q, *args):
        batch_rows.append(q.shape[0])
        return attend_grouped(q, *args)

    from eagleconv.nn.attention import attend_grouped
    monkeypatch.setattr(kv_cache, "attend_grouped", spy)
    _, path = seeded_pair(tmp_path, "llama")
    target = NativeTarget(path)
    ids = [0, 2, 3]
    seqs = [list(p) for p in RAGGED[:3]]
    caches = SlotCache.batch(target.num_layers, max(len(p) for p in seqs) + 6, len(seqs))
    with torch.no_grad():
        target_step(target, [Segment(c, p, 0) for c, p in zip(caches, seqs)], ids)
        block = caches[0].shared
        counts = []
        for step, members in enumerate([[0, 1, 2], [0, 2], [1, 2], [0, 1, 2]]):
            new = [[(11 * step + 3 * i + 1) % 300 for i in range(3)] for _ in members]
            batch_rows.clear()
            outs = target_step(target, [Segment(caches[m], t, len(seqs[m])) for m, t in zip(members, new)], ids)
            counts.append(sorted(set(batch_rows)))
            for m, t, (greedy, states) in zip(members, new, outs):
                seqs[m] += t
                full_greedy, full_states = target.forward(seqs[m], ids)
                assert torch.equal(greedy, full_greedy[-3:])
                # the batched product sums over the longest segment's slots (the others' masked ones add
                # zeros), in another order than a full forward: float32 rounding, grown over 3 seeded layers
                torch.testing.assert_close(states, torch.cat([full_states[i][-3:] for i in ids], -1),
                                           rtol=1e-4, atol=1e-4)
    # steps 1-3 batched (all rows of the block, then two subsets); step 4 writes prompts 0 and 2 past the
    # capacity: they get blocks of their own and that step attends per segment
    assert counts == [[3], [2], [2], [1]]
    assert caches[0].shared is None and caches[2].shared is None
    assert caches[1].shared is block and caches[1].kv is not None and block is not None and block.kv is not None
    assert caches[1].kv.data_ptr() == block.kv[:, :, 1].data_ptr()


def test_slot_cache_overwrites_rejected_slots_and_keeps_earlier_ones_when_it_grows():
    cache = SlotCache(1)
    first = torch.arange(2 * 40 * 3, dtype=torch.float32).view(2, 40, 3)
    cache.write(0, 0, first, -first)
    rejected = torch.full((2, 4, 3), 99.0)
    cache.write(0, 40, rejected, rejected)  # a round's drafts: slots 40..43, then only slot 40 accepted
    accepted = torch.full((2, 70, 3), 7.0)  # the next round writes from slot 41, past the first capacity (64)
    keys, values = cache.write(0, 41, accepted, -accepted)
    assert keys.shape == (2, 111, 3)
    assert torch.equal(keys[:, :40], first) and torch.equal(values[:, :40], -first)
    assert torch.equal(keys[:, 40], rejected[:, 0]) and torch.equal(keys[:, 41:], accepted)
    assert not (keys[:, 41:44] == 99.0).any()  # the rejected drafts' slots hold the new rows


def test_threads_default_to_the_idle_cores_chosen_and_are_restored(monkeypatch):
    import eagleconv.support._process as process

    chosen: list[tuple[int, float | None]] = []
    real = process.default_threads
    monkeypatch.setattr(process, "default_threads", lambda since=None: chosen.append(real(since)) or chosen[-1])
    seen: list[int] = []
    before = torch.get_num_threads()
    report = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:1], max_tokens=2,
                      progress=lambda what, done, total: seen.append(torch.get_num_threads()))
    assert len(chosen) == 1 and set(seen) == {chosen[0][0]} and torch.get_num_threads() == before
    assert 1 <= chosen[0][0] <= available_threads()
    # fewer threads than cores is said in the report, with the load that chose it
    monkeypatch.setattr(process, "default_threads", lambda since=None: (1, 1.7))
    seen.clear()
    report = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:1], max_tokens=2,
                      progress=lambda what, done, total: seen.append(torch.get_num_threads()))
    assert set(seen) == {1} and torch.get_num_threads() == before
    if available_threads() > 1:
        assert any("1 of" in n and "1.7 cores busy" in n and "--threads" in n for n in report.notes), report.notes
    monkeypatch.setattr(process, "default_threads", lambda since=None: (available_threads(), 0.0))
    report = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:1], max_tokens=2)
    assert not any("CPU threads" in n for n in report.notes), report.notes
    seen.clear()
    simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:1], max_tokens=2, threads=1,
             progress=lambda what, done, total: seen.append(torch.get_num_threads()))
    assert set(seen) == {1}


def test_cli_threads_option_reaches_torch(tmp_path):
    script = ("import sys, torch\nimport eagleconv.simulation as s\nreal = s._simulate\n"
              "def spy(*a, **k):\n    print('THREADS', torch.get_num_threads(), file=sys.stderr)\n"
              "    return real(*a, **k)\ns._simulate = spy\nfrom eagleconv.cli.main import main\n"
              "sys.argv = ['eagleconv', *sys.argv[1:]]\nmain()\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", script, "simulate", str(PAIR / "eagle3"), "--target",
                           str(PAIR / "target"), "--max-tokens", "2", "--threads", "1", "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "THREADS 1" in done.stderr
    assert json.loads(done.stdout)["max_tokens"] == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no CUDA device")
def test_device_cuda_without_a_gpu_is_one_clear_line():
    result = CliRunner().invoke(cli, ["simulate", str(PAIR / "eagle3"), "--target", str(PAIR / "target"),
                                      "--device", "cuda"])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line and "no CUDA device" in line, result.output


@pytest.mark.parametrize("kw,message", [({"device": "tpu"}, "cpu or cuda"), ({"threads": 0}, "give 1 to")])
def test_bad_device_or_threads_are_refused(kw, message):
    with pytest.raises(SimulateError, match=message):
        simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, **kw)


# SmolLM2-135M-Instruct's published config.json fields beyond transformers' own, at their published values, and
# what a transformers dump adds: none changes the math, so each alone keeps the target in eagleconv's runtime.
PUBLISHED = {"is_llama_config": True, "rope_interleaved": False, "pretraining_tp": 1, "use_cache": True,
             "transformers_version": "4.42.3", "pad_token_id": 2, "unk_token_id": 0,
             "initializer_range": 0.041666666666666664, "attention_dropout": 0.0, "rope_scaling": None,
             "_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
             "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}}}


def edited_target(tmp_path: Path, **fields) -> Path:
    out = tmp_path / "target"
    out.mkdir()
    for f in (PAIR / "target").iterdir():  # copied: a target's files resolve inside its directory (issue 28)
        if f.name != "config.json":
            shutil.copyfile(f, out / f.name)
    (out / "config.json").write_text(json.dumps({**json.loads((PAIR / "target" / "config.json").read_text()),
                                                 **fields}))
    return out


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_each_published_field_at_its_published_value_runs_natively(key, tmp_path):
    path = edited_target(tmp_path, **{key: PUBLISHED[key]})
    reference = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS[:2], max_tokens=8)
    report = simulate(PAIR / "eagle3", path, PROMPTS[:2], max_tokens=8)
    assert report.target_runtime == "eagleconv", report.notes
    assert report.tokens == reference.tokens and report.drafts == reference.drafts


@pytest.mark.parametrize("key,value,reason", [
    ("rope_interleaved", True, "rope_interleaved = True"), ("pretraining_tp", 2, "pretraining_tp = 2"),
    ("attention_dropout", 0.1, "attention_dropout = 0.1"), ("mlp_bias", True, "mlp_bias = True"),
    ("hidden_act", "gelu", "hidden_act = 'gelu'"), ("rope_scaling", {"rope_type": "dynamic", "factor": 2.0}, "rope"),
])
def test_a_value_that_changes_the_math_is_refused_with_the_reason(key, value, reason, tmp_path):
    path = edited_target(tmp_path, **{key: value})
    with pytest.raises(NativeUnsupported, match=reason.replace("(", r"\(")):
        NativeTarget(path)
    report = simulate(PAIR / "eagle3", path, PROMPTS[:1], max_tokens=4)  # auto: transformers, and it says why
    assert report.target_runtime == "transformers"
    assert any(key in n or "rope" in n for n in report.notes), report.notes


def test_slot_cache_sized_up_front_keeps_one_block_and_growth_keeps_every_layers_slots():
    """Capacity given: one [layers, 2, h, cap, d] block, never reallocated while writes stay inside it; a write
    past it grows the whole block and keeps what every layer holds (the rows a step wrote to earlier layers too)."""
    cache = SlotCache(2, capacity=50)
    first = torch.arange(2 * 40 * 3, dtype=torch.float32).view(2, 40, 3)
    for layer in (0, 1):
        cache.write(layer, 0, first + layer, -first)
    assert cache.kv is not None and cache.kv.shape == (2, 2, 2, 50, 3)
    block = cache.kv.data_ptr()
    cache.write(0, 40, first[:, :10], first[:, :10])  # slots 40..49: still inside
    assert cache.kv.data_ptr() == block
    keys, _ = cache.write(0, 50, first[:, :5], first[:, :5])  # past it: doubled, layer 1 kept
    assert cache.kv.shape[3] == 100 and keys.shape == (2, 55, 3)
    keys1, values1 = cache.write(1, 40, first[:, :15], -first[:, :15])
    assert torch.equal(keys1[:, :40], first + 1) and torch.equal(values1[:, :40], -first)
    assert torch.equal(keys[:, :40], first) and torch.equal(keys[:, 40:50], first[:, :10])


def test_drafter_logits_for_the_last_row_only_are_the_full_passes_last_row():
    """The proposer's first pass computes logits for its last row only (what it samples)."""
    LAST = slice(-1, None)
    d = engine_drafter(PAIR / "eagle3", "vllm:0.32", NativeTarget(PAIR / "target"))
    m = d.model
    ids, T = torch.tensor([PROMPTS[0][1:]]), len(PROMPTS[0]) - 1
    hidden = torch.randn(1, T, m.spec.hidden_size, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full = m.forward(ids, torch.arange(T), hidden)
        last = m.forward(ids, torch.arange(T), hidden, logits_rows=LAST)
    assert last.logits.shape == (1, 1, full.logits.shape[-1])
    torch.testing.assert_close(last.logits[:, 0], full.logits[:, -1], rtol=1e-5, atol=1e-5)
    assert torch.equal(last.logits[:, 0].argmax(-1), full.logits[:, -1].argmax(-1))
    assert torch.equal(last.feedback, full.feedback)


def test_simulate_with_packed_linears_drafts_what_torchs_matmul_drafts(monkeypatch):
    """simulate's default (oneDNN, weights reordered once) against torch's matmul (EAGLECONV_PACKED_LINEARS=0):
    the same tokens, counters and drafts on the tiny pair with every weight packed, and the report says which ran.
    Left alone, tiny-pair's weights are all under PACK_MIN_BYTES: none is packed."""
    from eagleconv.forward import weights as weights_mod
    from eagleconv.nn import packed_linear

    if not packed_linear.available():
        pytest.skip("this torch has no usable oneDNN")
    small = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, max_tokens=12)
    assert not any("oneDNN" in n for n in small.notes)
    monkeypatch.setattr(weights_mod, "PACK_MIN_BYTES", 0)
    packed = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, max_tokens=12)
    assert packed.tokens == small.tokens and packed.drafts == small.drafts
    monkeypatch.setenv("EAGLECONV_PACKED_LINEARS", "0")
    plain = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, max_tokens=12)
    assert packed.tokens == plain.tokens and packed.drafts == plain.drafts
    assert packed.accepted_per_position == plain.accepted_per_position
    assert any("oneDNN" in n for n in packed.notes) and not any("oneDNN" in n for n in plain.notes)


@pytest.mark.parametrize("architecture", ["llama", "qwen3", "deepseek_mla"])
def test_one_ragged_proposer_batch_drafts_what_each_prompt_drafts_alone(architecture, tmp_path):
    """forward.kv_cache.propose_batch runs every request's rows through the drafter in one pass per step
    (attention per request): two rounds of three ragged requests draft what each request drafts alone and what
    the uncached reference (Drafter.draft over every verified row) drafts."""
    from eagleconv.forward.api import load
    from eagleconv.forward.kv_cache import DraftState, propose_batch
    from eagleconv.forward.model import DraftInputs

    dims = TinyDims()
    path = make_drafter(tmp_path / architecture, DrafterRecipe(producer="vllm", architecture=architecture,
                                                               dims=dims, dtype="float32", seed=4))
    model = load(path)
    g = torch.Generator().manual_seed(9)
    seqs = [[1, 17, 42, 99, 7, 30, 11], [5, 9], [3, 3, 8, 100, 64]]
    auxes = [torch.randn(len(s) + 2, 3 * dims.target_hidden, generator=g) for s in seqs]  # rows of two rounds
    together, alone = [DraftState() for _ in seqs], [DraftState() for _ in seqs]
    with torch.no_grad():
        for extra in (0, 2):  # round 2: two more verified tokens per request, their two new rows
            now = [s + [(7 * i + 5 * extra) % dims.vocab for i in range(extra)] for s in seqs]
            new = [a[len(n) - 1 - (extra or len(n) - 1):len(n) - 1] for a, n in zip(auxes, now)]
            batched = propose_batch(model, together, now, new, 3)
            single = [propose_batch(model, [st], [n], [a], 3)[0] for st, n, a in zip(alone, now, new)]
            reference = [[int(t[0]) for t in
                          model.draft(DraftInputs(torch.tensor([n]), a[:len(n) - 1][None]), 3).tokens]
                         for n, a in zip(now, auxes)]
            assert batched == single == reference
    assert len({t for d in batched for t in d}) > 2  # the drafts vary: the test can tell requests apart
