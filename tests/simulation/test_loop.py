"""simulate's one decode loop (issue 37): llama.cpp's two loops run on the cached, batched path vLLM's runs on.

Their tokens, drafts and counters must be exactly those of the plain definition (``kv_cache=False``: everything
re-run each round, prompt by prompt); the drafter must see each verified row once, all prompts in one batch per
step; and eagleconv's own target runtime must not import transformers for llama.cpp's checks either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from eagleconv.forward.model import Drafter  # noqa: E402 (after the importorskip)
from eagleconv.simulation import simulate  # noqa: E402 (after the importorskip)

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
PROMPTS = json.loads((PAIR / "prompts.json").read_text())
SAME = ("tokens", "drafts", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position",
        "num_generated", "notes")


def llamacpp(loop: str, prompts, **kw) -> dict:
    report = simulate(PAIR / "eagle3", PAIR / "target", prompts, engine="llama.cpp", llamacpp_loop=loop, threads=1,
                      **kw).model_dump()
    return {k: report[k] for k in SAME}


@pytest.mark.parametrize("loop", ["server", "simple"])
@pytest.mark.parametrize("k,n,p_min", [(3, 16, 0.0), (5, 9, 0.0), (2, 12, 0.3)])
def test_llamacpp_loops_cached_equal_the_full_rerun(loop, k, n, p_min):
    """A one-token prompt among them (the simple loop's empty first round), drafts cut by the budget and by p_min."""
    prompts = [[PROMPTS[0][0]], *PROMPTS[1:]]
    kw = {"num_speculative_tokens": k, "max_tokens": n, "p_min": p_min}
    cached, full = llamacpp(loop, prompts, kv_cache=True, **kw), llamacpp(loop, prompts, kv_cache=False, **kw)
    assert cached == full
    assert cached["num_draft_tokens"] > 0


@pytest.mark.parametrize("loop", ["server", "simple"])
def test_llamacpp_drafter_sees_each_verified_row_once_all_prompts_together(loop, monkeypatch):
    """Each proposer step is one drafter pass over every drafting prompt (K passes a step, not K per prompt), and the
    first passes cover each verified row once: the old loop re-ran the drafter over the whole sequence, prompt by
    prompt, every round."""
    rows: list[int] = []
    forward = Drafter.forward

    def counted(self, ids, *args, **kw):
        rows.append(ids.shape[0] * ids.shape[1])
        return forward(self, ids, *args, **kw)

    monkeypatch.setattr(Drafter, "forward", counted)
    K = 3
    report = simulate(PAIR / "eagle3", PAIR / "target", PROMPTS, num_speculative_tokens=K, max_tokens=24,
                      engine="llama.cpp", llamacpp_loop=loop, threads=1)
    steps = max(len(d) for d in report.drafts)  # proposer steps: at most the longest prompt's rounds (+1)
    assert len(rows) <= K * steps < K * sum(len(d) - 1 for d in report.drafts)
    verified = sum(len(p) + len(t) for p, t in zip(PROMPTS, report.tokens))
    proposals = sum(len(d) for d in report.drafts)
    assert sum(rows) <= verified + (K - 1) * proposals


def test_native_llamacpp_path_imports_no_transformers():
    """llama.cpp's checks read the target's config: from the native runtime's own numbers, not transformers'
    AutoConfig (its import was half of simulate --engine llama.cpp's time on the tiny pair)."""
    code = ("import sys; from eagleconv.simulation import simulate; "
            f"r = simulate({str(PAIR / 'eagle3')!r}, {str(PAIR / 'target')!r}, None, max_tokens=4, threads=1, "
            "engine='llama.cpp'); assert r.target_runtime == 'eagleconv'; "
            "assert 'transformers' not in sys.modules, 'transformers imported'")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_native_target_info_is_what_transformers_reads():
    pytest.importorskip("transformers")
    from eagleconv.forward.native_target import NativeTarget
    from eagleconv.simulation.drafter import target_info
    from eagleconv.config.target import load_target

    assert target_info(NativeTarget(PAIR / "target"), PAIR / "target") == load_target(PAIR / "target")
