"""Layouts' field tables see the architectures registered now, not those registered when the layout was defined.

A plugin architecture with a shape-bearing config field of its own (as MLA has ``kv_lora_rank``) is registered after
every shipped layout; each layout must then read that field from the place it keeps decoder fields (top level, or
``transformer_layer_config.`` for speculators), and forget it once the architecture is removed.
"""

from __future__ import annotations

import pytest

from eagleconv import architectures
from eagleconv.architectures.llama import Llama
from eagleconv.formats import LAYOUTS
from eagleconv.formats.base.fields import get_path, set_path
from eagleconv.formats.base.reading import read_fields

FIELD = "plugin_latent_rank"


class PluginRank(Llama):
    name = "plugin_rank"
    description = "test-only: Llama with one more shape-bearing config field"
    priority = 260
    fallback = False
    default_model_type = "plugin_rank"
    model_types = frozenset({"plugin_rank"})
    synthetic_model_type = "plugin_rank"
    layouts = {}
    examples = ()
    verdicts = ()
    config_fields = (FIELD,)


@pytest.fixture
def plugin():
    architectures.register(PluginRank)
    try:
        yield PluginRank
    finally:
        architectures.ARCHITECTURES.pop(PluginRank.name, None)


@pytest.mark.parametrize("layout", sorted(LAYOUTS), ids=str)
def test_a_later_architectures_config_field_is_read_by_every_layout(layout, plugin):
    cls = LAYOUTS[layout]
    hidden = cls.fields["hidden_size"].read[0]
    path = hidden[: -len("hidden_size")] + FIELD  # where this layout keeps its decoder fields
    assert cls.fields[FIELD].read == (path,)
    config: dict = {}
    set_path(config, hidden, 64)
    set_path(config, path, 48)
    values, consumed = read_fields(cls, config)
    assert values[FIELD] == 48 and path in consumed
    assert plugin.missing({k: v for k, v in values.items() if k != FIELD}) == [FIELD]
    assert get_path(config, path) == 48


@pytest.mark.parametrize("layout", sorted(LAYOUTS), ids=str)
def test_a_removed_architectures_field_is_gone(layout):
    assert FIELD not in LAYOUTS[layout].fields
    assert "kv_lora_rank" in LAYOUTS[layout].fields  # the shipped MLA family's own field, from the registry too
