"""Long refusals name the way out once (issue 35 item 7): converting an EAGLE-3.1 drafter to GGUF used to print a
~2,000-character line repeating the same advice five times, and ``validate --engine llama.cpp`` listed EC021/EC022
errors without the command that helps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LIMIT = 700  # characters: the problems, named once each, and the way out once


def test_a_31_drafter_to_gguf_is_refused_in_one_short_line(tmp_path: Path):
    pytest.importorskip("gguf")
    from tests.formats.test_gguf import target_for

    src = FIXTURES / "specforge-llama-eagle31"
    target = target_for(src, tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "d.gguf"), "--to", "gguf",
                                      "--target", str(target)])
    assert result.exit_code == 1, result.output
    out = result.output.strip()
    assert len(out.splitlines()) == 1 and len(out) <= LIMIT, f"{len(out)} characters:\n{out}"
    # every problem still named, the advice once, and the option it names explained for the command it belongs to
    for problem in ("fc_norm = true", "norm_output = true", "fc_norm.0.weight", "fc_norm.1.weight", "fc_norm.2.weight"):
        assert problem in out
    assert out.count("eagleconv downgrade") == 1 and out.count("llama.cpp has no per-layer") == 1
    assert "downgrade's name for convert's --target" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target.gguf"]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_validate_llamacpp_names_the_way_out_once(as_json: bool):
    pair = FIXTURES / "tiny-pair"
    args = ["validate", str(pair / "eagle31"), "--engine", "llama.cpp", "--target", str(pair / "target"),
            "--no-numeric"] + (["--json"] if as_json else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    messages = [f["message"] for f in json.loads(result.output)["findings"]] if as_json else [result.output]
    text = "\n".join(messages)
    assert "EC021" in result.output or as_json
    assert text.count("eagleconv downgrade SRC DST --allow-lossy") == 1, text
    assert text.count("upgrade EAGLE3_SRC DST --style norm_before_fc --no-norm-output") == 1, text


def test_an_engine_with_31_switches_gets_no_way_out():
    pair = FIXTURES / "tiny-pair"
    result = CliRunner().invoke(cli, ["validate", str(pair / "eagle31"), "--engine", "vllm", "--no-numeric"])
    assert "eagleconv downgrade" not in result.output, result.output
