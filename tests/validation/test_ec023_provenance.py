"""EC023 (SpecForge PR #879's norm_output) is a doubt about a trainer's checkpoint, not about one eagleconv wrote
itself (issue 35 item 9): its provenance stamp says when the flags are eagleconv's."""

from __future__ import annotations

import json
from pathlib import Path

import eagleconv
from eagleconv.conversion import convert

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def ec023(path: Path) -> list[str]:
    report = eagleconv.validate(path, engines=(), numeric=False)
    return [f.message for f in report.findings if f.code == "EC023" and "#879" in f.message]


def test_a_specforge_31_from_another_layout_gets_no_pr_879_doubt(tmp_path: Path):
    out = tmp_path / "sf"
    convert(FIXTURES / "tiny-pair" / "eagle31", out, "specforge")  # the README's step 0
    assert json.loads((out / "config.json").read_text())["norm_output"] is True
    assert ec023(out) == []


def test_an_upgrade_to_specforge_gets_no_pr_879_doubt(tmp_path: Path):
    from eagleconv.eagle31.api import upgrade

    out = tmp_path / "up"
    upgrade(FIXTURES / "specforge-llama-eagle3", out, to="specforge")
    assert json.loads((out / "config.json").read_text())["eagleconv"]["transform"] == "upgrade"
    assert ec023(out) == []


def test_a_trainers_specforge_31_keeps_it_even_through_eagleconv(tmp_path: Path):
    assert ec023(FIXTURES / "specforge-llama-eagle31")
    out = tmp_path / "copy"
    convert(FIXTURES / "specforge-llama-eagle31", out, "specforge")  # same trainer's flags, same doubt
    assert ec023(out)
