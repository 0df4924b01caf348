"""Issue 27 item 12: upgrade warns, naming the number, when given fewer calibration tokens than it needs.

The minimum (eagle31.MIN_CALIBRATION_TOKENS) is what benchmarks/upgrade_calibration.py measured on the SmolLM2
pair; here the tiny pair's target is captured on prompts below and above it, through the library and the CLI.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import eagleconv
from eagleconv.eagle31.api import MIN_CALIBRATION_PROMPTS, MIN_CALIBRATION_TOKENS

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
TARGET, EAGLE3 = PAIR / "target", PAIR / "eagle3"
LAYERS = [1, 2, 3]  # what the tiny-pair drafters state
VOCAB = json.loads((TARGET / "config.json").read_text())["vocab_size"]


def prompts(tokens: int, length: int = 50) -> list[list[int]]:
    """Seeded prompts of ``length`` tokens, ``tokens`` in all."""
    rng = random.Random(tokens)
    sizes = [length] * (tokens // length) + ([tokens % length] if tokens % length else [])
    return [[rng.randrange(VOCAB) for _ in range(n)] for n in sizes]


def warnings(report) -> list[str]:
    return [n for n in report.notes if n.startswith("warning: ") and "calibration tokens" in n]


def test_fewer_calibration_tokens_than_the_minimum_warn_with_the_numbers(tmp_path):
    few = tmp_path / "few.safetensors"
    eagleconv.capture_aux_states(TARGET, prompts(MIN_CALIBRATION_TOKENS - 1), LAYERS, save_to=few)
    report = eagleconv.upgrade(EAGLE3, tmp_path / "few", calibration=few, target=TARGET)
    [line] = warnings(report)
    assert f"only {MIN_CALIBRATION_TOKENS - 1} calibration tokens" in line
    assert f"at least {MIN_CALIBRATION_TOKENS}" in line and f"{MIN_CALIBRATION_PROMPTS} prompts" in line
    enough = tmp_path / "enough.safetensors"
    eagleconv.capture_aux_states(TARGET, prompts(MIN_CALIBRATION_TOKENS), LAYERS, save_to=enough)
    assert warnings(eagleconv.upgrade(EAGLE3, tmp_path / "enough", calibration=enough, target=TARGET)) == []
    # no calibration at all has its own note (unit weights), not this one
    assert warnings(eagleconv.upgrade(EAGLE3, tmp_path / "none")) == []


def test_the_cli_prints_the_warning_on_one_line_for_target_and_prompts(tmp_path):
    given = tmp_path / "prompts.json"
    given.write_text(json.dumps(prompts(120, length=40)))  # 3 prompts, 120 tokens
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "eagleconv", "upgrade", str(EAGLE3), str(tmp_path / "out"),
                           "--target", str(TARGET), "--prompts", str(given)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("warning: ")]
    assert len(lines) == 1 and "only 120 calibration tokens (3 prompts)" in lines[0], done.stdout
    assert f"at least {MIN_CALIBRATION_TOKENS}" in lines[0] and "--prompts" in lines[0]
