"""Human output that reads as the README does (issue 27 item 13): simulate numbers positions 1..K, upgrade's
unit-weight comparison says what its numbers are."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from eagleconv.cli.main import cli

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"


def test_simulate_numbers_positions_from_one(tmp_path):
    args = ["simulate", str(PAIR / "eagle31"), "--target", str(PAIR / "target"), "--num-speculative-tokens", "3",
            "--max-tokens", "6"]
    report = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    human = CliRunner().invoke(cli, args)
    assert human.exit_code == 0, human.output
    rows = [line.split() for line in human.output.splitlines() if re.match(r"\s*\d+\s+\d+/\d+\s", line)]
    assert [int(r[0]) for r in rows] == [1, 2, 3]
    drafts = report["num_drafts"]
    assert [r[1] for r in rows] == [f"{n}/{drafts}" for n in report["accepted_per_position"]]  # JSON unchanged


def test_upgrade_labels_the_unit_weight_comparison(tmp_path):
    args = ["upgrade", str(PAIR / "eagle3"), "--target", str(PAIR / "target"), "--prompts", str(PAIR / "prompts.json")]
    report = json.loads(CliRunner().invoke(cli, [*args[:2], str(tmp_path / "a"), *args[2:], "--json"]).output)
    assert report["initialisation"] == "calibrated" and report["divergence_unit_weights"]
    human = CliRunner().invoke(cli, [*args[:2], str(tmp_path / "b"), *args[2:]])
    assert human.exit_code == 0, human.output
    for unit in report["divergence_unit_weights"]:
        assert (f"(with unit norm weights instead of calibrated ones: top-1 agreement {unit['top1_agreement']:.3f}, "
                f"max abs err {unit['max_abs_err']:.3g})") in human.output
    assert "(unit weights:" not in human.output
