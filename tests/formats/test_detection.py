"""Layout detection: a tie is an explicit outcome (reported, --from settles it), never a silent pick; a DDP
``module.`` prefix gets a hint."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import edit_config
from eagleconv.cli.main import cli
from eagleconv.errors import AmbiguousLayoutError
from eagleconv.formats import detect_layout
from eagleconv.spec.report import InspectReport


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def tied(drafter):
    """A SafeAILab midlayer pickle whose config says LlamaForCausalLMEagle3: eagle and specforge score alike."""
    src = drafter(producer="eagle")
    edit_config(src, architectures=["LlamaForCausalLMEagle3"], eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 7, 12]})
    return src


def test_tie_is_refused_with_the_candidates_and_the_way_out(tied, tmp_path):
    for args in (["inspect", str(tied), "--allow-pickle"],
                 ["validate", str(tied), "--allow-pickle", "--no-numeric"],
                 ["convert", str(tied), str(tmp_path / "out"), "--to", "vllm", "--allow-pickle"]):
        result = run(*args)
        assert result.exit_code == 2, result.output
        line = [ln for ln in result.output.splitlines() if ln.startswith("eagleconv: error:")]
        assert len(line) == 1 and "eagle" in line[0] and "specforge" in line[0]
        assert "--from eagle" in line[0] and "--from specforge" in line[0]
    assert not (tmp_path / "out").exists()


def test_from_settles_the_tie_and_decides_the_numbering(tied):
    as_eagle = InspectReport.model_validate_json(run("inspect", str(tied), "--allow-pickle", "--from", "eagle", "--json").output)
    as_specforge = InspectReport.model_validate_json(
        run("inspect", str(tied), "--allow-pickle", "--from", "specforge", "--json").output)
    assert (as_eagle.format, as_specforge.format) == ("eagle", "specforge")
    # the same stored ids mean different target layers: the pick is not a detail
    assert as_eagle.aux_layer_ids == as_specforge.aux_layer_ids == [1, 7, 12]
    assert as_eagle.aux_layer_ids_hidden_state_index != as_specforge.aux_layer_ids_hidden_state_index


def test_library_tie_names_every_candidate():
    from eagleconv.formats.base import Seen  # noqa: F401  (the detection input type)

    names = {"fc.weight", "midlayer.self_attn.q_proj.weight", "lm_head.weight", "d2t", "t2d"}
    with pytest.raises(AmbiguousLayoutError) as info:
        detect_layout({"architectures": ["LlamaForCausalLMEagle3"]}, names, weights_kind="pickle")
    assert info.value.candidates == ["eagle", "specforge"]
    layout, _ = detect_layout({"architectures": ["LlamaForCausalLMEagle3"]}, names)  # safetensors: no tie
    assert layout.name == "specforge"


@pytest.mark.parametrize("producer,code", [("vllm", "EC002"), ("speculators", "EC003")])
def test_ddp_module_prefix_gets_a_hint(drafter, producer, code):
    """Tensors alone (vllm): not recognisable, EC002; a config that names its layout (speculators): EC003."""
    from safetensors.torch import load_file, save_file

    src = drafter(producer=producer)
    for shard in src.glob("*.safetensors"):
        tensors = load_file(str(shard))
        save_file({f"module.{k}": v for k, v in tensors.items()}, str(shard))
    if producer == "vllm":
        cfg = json.loads((src / "config.json").read_text())
        cfg.pop("eagleconv", None)
        (src / "config.json").write_text(json.dumps(cfg))
    for args in (["inspect", str(src)], ["validate", str(src), "--no-numeric"]):
        result = run(*args)
        assert result.exit_code == 1 and code in result.output, result.output
        assert "DistributedDataParallel" in " ".join(result.output.split()), result.output
