"""One prompts reader (``forward.inputs.read_prompts``) for every ``--prompts``: the same file gets the same verdict
from simulate, validate --forward, diff and upgrade, on the committed tiny pair (real target, real drafters)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.errors import FormatError
from eagleconv.forward import check_prompts, read_prompts

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"
VOCAB = json.loads((PAIR / "target" / "config.json").read_text())["vocab_size"]  # 512

# file content -> what the one-line message says
BAD = {
    "not JSON": ("[[1, 2", "the prompts are not JSON"),
    "not a list": ('{"not": "a list"}', "prompts must be a non-empty JSON list of token-id lists"),
    "empty list": ("[]", "prompts must be a non-empty JSON list"),
    "a prompt that is no list": ("[[1, 2], 7]", "prompt 1 is 7, not a non-empty list of token ids"),
    "an empty prompt": ("[[1, 2], []]", "prompt 1 is [], not a non-empty list of token ids"),
    "a float id": ("[[1, 2.0]]", "prompt 0: 2.0 is not a token id"),
    "a string id": ('[[1, "7"]]', 'prompt 0: "7" is not a token id'),
    "a bool id": ("[[1, true]]", "prompt 0: true is not a token id"),
    "a negative id": ("[[1, -3]]", "prompt 0: -3 is not a token id (a non-negative integer)"),
    "an id beyond the vocabulary": (f"[[3], [1, {VOCAB}]]",
                                    f"prompt 1: token {VOCAB} is outside the target's vocabulary (0..{VOCAB - 1})"),
}


def commands(prompts: Path, out: Path) -> dict[str, list[str]]:
    target, drafter = str(PAIR / "target"), str(PAIR / "eagle3")
    return {
        "simulate": ["simulate", drafter, "--target", target, "--prompts", str(prompts), "--max-tokens", "2"],
        "validate": ["validate", drafter, "--forward", "--steps", "1", "--no-numeric", "--target", target,
                     "--prompts", str(prompts)],
        "diff": ["diff", drafter, str(PAIR / "eagle31"), "--steps", "1", "--target", target, "--prompts",
                 str(prompts)],
        "upgrade": ["upgrade", drafter, str(out), "--target", target, "--prompts", str(prompts)],
    }


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_command_refuses_the_same_bad_prompts_file_in_one_line(case, tmp_path):
    content, says = BAD[case]
    prompts = tmp_path / "prompts.json"
    prompts.write_text(content)
    expected = f"eagleconv: error: {prompts}: "
    for name, args in commands(prompts, tmp_path / "out").items():
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2, (name, r.output)
        assert r.output.startswith(expected) and says in r.output and r.output.count("\n") == 1, (name, r.output)
        assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()  # upgrade wrote nothing


def test_a_missing_prompts_file_is_one_line_naming_it(tmp_path):
    missing = tmp_path / "missing.json"
    for name, args in commands(missing, tmp_path / "out").items():
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and f"{missing}: cannot read the prompts: No such file" in r.output, (name, r.output)
        assert r.output.count("\n") == 1


def test_one_token_prompts_run_everywhere(tmp_path):
    """One token is enough: the target predicts the next, which is the drafter's one first-pass row (validate,
    diff and upgrade used to demand two)."""
    prompts = tmp_path / "prompts.json"
    prompts.write_text("[[5], [7, 9]]")
    for name, args in commands(prompts, tmp_path / "out").items():
        r = CliRunner().invoke(cli, [*args, "--json"])
        assert r.exit_code in (0, 1), (name, r.output)  # diff: 1 = the two drafters differ
        data = json.loads(r.output)
        if name == "simulate":
            assert len(data["tokens"]) == 2 and all(len(t) == 2 for t in data["tokens"])
        elif name == "validate":
            assert [len(s["tokens"]) for s in data["forward"]["steps"]] == [2]
        elif name == "upgrade":
            assert data["initialisation"] == "calibrated" and "3 tokens" in data["calibration"]


def test_library_reader_and_checker_share_the_rules(tmp_path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text("[[1, -3]]")
    with pytest.raises(FormatError, match="-3 is not a token id") as info:
        read_prompts(prompts)
    assert info.value.path == str(prompts) and info.value.exit_code == 2
    prompts.write_text(f"[[1, {VOCAB}]]")
    assert read_prompts(prompts) == [[1, VOCAB]]  # no vocabulary given: only the target knows it
    with pytest.raises(FormatError, match="outside the target's vocabulary"):
        read_prompts(prompts, VOCAB)
    assert check_prompts(((1, 2), [3])) == [[1, 2], [3]]  # the library may pass tuples
    with pytest.raises(FormatError, match="prompt 0: true is not a token id"):
        check_prompts([[True]])
