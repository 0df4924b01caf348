"""Schemas: committed JSON Schemas are current, config models type-check without defaulting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.conftest import edit_config
from eagleconv import convert
from eagleconv.spec.drafter import AuxLayers
from eagleconv.errors import ConversionError
from eagleconv.architectures.llama import LlamaEagle3Config
from eagleconv.formats.base.speculators_config import SpeculatorsEagle3Config
from eagleconv.readers.schemas import json_schemas

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def test_committed_schemas_are_current():
    expected = json_schemas()
    committed = {p.name: p.read_text() for p in SCHEMAS.glob("*.schema.json")}
    stale = sorted(n for n in expected if committed.get(n) != expected[n])
    extra = sorted(set(committed) - set(expected))
    assert not stale and not extra, f"run `eagleconv schema --out schemas/` (stale: {stale}, extra: {extra})"


def test_config_models_default_nothing_shape_bearing():
    cfg = LlamaEagle3Config.model_validate({"architectures": ["LlamaForCausalLMEagle3"]})
    assert cfg.hidden_size is None and cfg.draft_vocab_size is None and cfg.num_aux_hidden_states is None


@pytest.mark.parametrize("bad", [{"fc_norm": "yes"}, {"hidden_size": 0}, {"draft_vocab_size": -5},
                                 {"eagle_config": {"norm_before_fc": 1}}])
def test_config_models_reject_wrong_types(bad):
    with pytest.raises(ValidationError):
        LlamaEagle3Config.model_validate(bad)


def test_speculators_model_requires_transformer_layer_config():
    with pytest.raises(ValidationError):
        SpeculatorsEagle3Config.model_validate({"speculators_model_type": "eagle3"})


def test_aux_ids_need_a_convention():
    with pytest.raises(ValidationError, match="numbering convention"):
        AuxLayers(count=3, ids=(2, 8, 13))
    aux = AuxLayers(count=3, ids=(1, 7, 12), convention="layer_output")
    assert aux.ids_as("hidden_state_index") == (2, 8, 13)


def test_wrongly_typed_flag_in_a_checkpoint_is_a_finding(drafter, tmp_path):
    src = drafter(producer="specforge")
    edit_config(src, fc_norm="true")
    with pytest.raises(ConversionError, match="fc_norm"):
        convert(src, tmp_path / "out", "vllm")
