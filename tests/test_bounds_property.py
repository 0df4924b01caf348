"""Issue 28, deliverable 2: a config with a size over eagleconv's limits, given to any command, is one line on
stderr and exit 2, under a 3 GiB address-space limit (eagleconv itself, torch included, runs in under 1 GiB),
before anything is allocated from it.  Each example is a real subprocess on the tiny pair's files."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagleconv.support import bounds
from tests.test_bounds import EAGLE31, PAIR, TARGET, cli_limited

# (field, its limit) for the fields a drafter or target config sizes things with
FIELDS = [("num_hidden_layers", bounds.MAX_LAYERS), ("hidden_size", bounds.MAX_DIM),
          ("intermediate_size", bounds.MAX_DIM), ("num_attention_heads", bounds.MAX_HEADS),
          ("num_key_value_heads", bounds.MAX_HEADS), ("head_dim", bounds.MAX_DIM), ("vocab_size", bounds.MAX_VOCAB),
          ("draft_vocab_size", bounds.MAX_VOCAB), ("target_hidden_size", bounds.MAX_DIM),
          ("max_position_embeddings", bounds.MAX_POSITIONS), ("num_aux_hidden_states", bounds.MAX_AUX)]


@st.composite
def oversized(draw) -> dict:
    """One config change over a limit: a huge dimension or count, or an aux id list too long."""
    if draw(st.booleans()) and draw(st.booleans()):
        n = draw(st.integers(bounds.MAX_AUX + 1, 100_000))
        return {"eagle_aux_hidden_state_layer_ids": list(range(n))}
    field, limit = draw(st.sampled_from(FIELDS))
    return {field: draw(st.one_of(st.integers(limit + 1, 10 ** 12), st.integers(10 ** 12, 10 ** 30)))}


COMMANDS = {
    "inspect": ("inspect", "{d}"),
    "validate": ("validate", "{d}"),
    "lint": ("lint", "{d}/config.json"),
    "convert": ("convert", "{d}", "{out}", "--to", "vllm"),
    "push": ("push", "{d}", "org/name", "--dry-run", "--no-forward"),
    "simulate": ("simulate", "{d}", "--target", "{t}", "--max-tokens", "2"),
    "validate-forward-target": ("validate", str(PAIR / "eagle3"), "--forward", "--target", "{t_bad}"),
    "simulate-target": ("simulate", str(PAIR / "eagle3"), "--target", "{t_bad}", "--max-tokens", "2"),
    "upgrade": ("upgrade", str(PAIR / "eagle3"), "{out}", "--target", "{t_bad}", "--prompts",
                str(PAIR / "prompts.json")),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(change=oversized())
def test_oversized_config_is_one_line_and_exit_2(command, change):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        d, t_bad = root / "drafter", root / "target"
        shutil.copytree(EAGLE31, d)
        shutil.copytree(TARGET, t_bad)
        for directory in (d, t_bad):
            cfg = json.loads((directory / "config.json").read_text())
            cfg.update(change)
            (directory / "config.json").write_text(json.dumps(cfg))
        args = [a.format(d=d, t=TARGET, t_bad=t_bad, out=root / "out") for a in COMMANDS[command]]
        result = cli_limited(3, *args, timeout=60)  # raises TimeoutExpired if it hangs: a failure
        assert result.returncode == 2, (change if len(str(change)) < 200 else list(change), result.stderr[-1500:])
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "internal error" not in lines[0], result.stderr[-1500:]
        assert "config.json" in lines[0], lines[0]
        assert not (root / "out").exists()
