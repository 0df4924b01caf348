"""Config fields: where each canonical field lives in a layout's config.json, and dotted-path access.

Split from ``formats/base.py`` (issue 26): the field table (:func:`hf_fields`) and the markers a
layout's ``defaults`` use (:class:`SameAs`, :class:`FromArchitecture`) are data that reading and
writing both consult; ``get_path``/``set_path`` are the one way a dotted config path is read or written.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from dataclasses import dataclass
from typing import Any

from ... import architectures

@dataclass(frozen=True)
class ConfigField:
    """Where a canonical field lives in a layout's config.json.

    ``read``: dotted paths tried in order (the first present wins, which is how
    the engines that read this layout resolve synonyms).  ``write``: every path
    written (defaults to the first read path), so synonyms stay in agreement.
    """

    read: tuple[str, ...]
    write: tuple[str, ...] | None = None

    @property
    def write_paths(self) -> tuple[str, ...]:
        return self.write if self.write is not None else self.read[:1]


class FieldTable(Mapping[str, ConfigField]):
    """A layout's field table, built when read, not when the layout class is defined.

    The shared fields are fixed, but each architecture's own decoder fields (``Architecture.config_fields``, MLA's
    ``kv_lora_rank``...) come from the registry as it is now: an architecture registered after the layouts (a
    plugin) has its shape-bearing fields read and written by every layout, with no re-binding step.
    """

    def __init__(self, decoder: str, overrides: Mapping[str, ConfigField | None]) -> None:
        self._decoder = decoder
        self._overrides = dict(overrides)

    def _table(self) -> dict[str, ConfigField]:
        d = self._decoder
        table: dict[str, ConfigField | None] = {
            "model_type": ConfigField((f"{d}model_type",)),
            "hidden_size": ConfigField((f"{d}hidden_size",)),
            "num_hidden_layers": ConfigField((f"{d}num_hidden_layers",)),
            "num_attention_heads": ConfigField((f"{d}num_attention_heads",)),
            "num_key_value_heads": ConfigField((f"{d}num_key_value_heads",)),  # HF's attention fields, MLA's too
            "head_dim": ConfigField((f"{d}head_dim",)),
            "intermediate_size": ConfigField((f"{d}intermediate_size",)),
            "hidden_act": ConfigField((f"{d}hidden_act",)),
            "rms_norm_eps": ConfigField((f"{d}rms_norm_eps",)),
            "vocab_size": ConfigField((f"{d}vocab_size",)),
            "max_position_embeddings": ConfigField((f"{d}max_position_embeddings",)),
            "attention_bias": ConfigField((f"{d}attention_bias",)),
            "mlp_bias": ConfigField((f"{d}mlp_bias",)),
            "rope_theta": ConfigField((f"{d}rope_theta",)),
            "rope_scaling": ConfigField((f"{d}rope_scaling",)),
            "rope_parameters": ConfigField((f"{d}rope_parameters",)),
            # each architecture's own decoder fields (Architecture.config_fields), in registry order, as registered now
            **{f: ConfigField((f"{d}{f}",)) for arch in architectures.ARCHITECTURES.values()
               for f in arch.config_fields},
            "dtype": ConfigField(("torch_dtype", "dtype")),
            "draft_vocab_size": ConfigField(("draft_vocab_size",)),
            "target_hidden_size": ConfigField(("target_hidden_size",)),
            "num_aux_hidden_states": ConfigField(("num_aux_hidden_states",)),
            "aux_layer_ids": ConfigField(("eagle_config.eagle_aux_hidden_state_layer_ids",
                                          "eagle_aux_hidden_state_layer_ids")),
            "fc_norm": ConfigField(("fc_norm",)),
            "norm_before_fc": ConfigField(("eagle_config.norm_before_fc", "norm_before_fc")),
            "norm_output": ConfigField(("norm_output",)),
            "norm_before_residual": ConfigField(("norm_before_residual",)),
            "use_aux_hidden_state": ConfigField(("eagle_config.use_aux_hidden_state",)),
        }
        table.update(self._overrides)
        return {k: v for k, v in table.items() if v is not None}

    def __getitem__(self, key: str) -> ConfigField:
        return self._table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def items(self) -> ItemsView[str, ConfigField]:  # one build per loop, not one per key
        return self._table().items()

    def values(self) -> ValuesView[ConfigField]:
        return self._table().values()


def hf_fields(decoder: str = "", **overrides: ConfigField | None) -> FieldTable:
    """The Hugging Face-style field table, decoder fields under ``decoder`` (a path prefix); ``None`` removes one."""
    return FieldTable(decoder, overrides)


MISSING = object()  # what get_path returns for an absent path (None is a legal JSON value)


class SameAs(str):
    """A layout default that copies another field (vLLM: target_hidden_size defaults to hidden_size)."""


def get_path(config: Mapping[str, object], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def set_path(config: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = config
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


class FromArchitecture(str):
    """A layout default each architecture states, as the attribute named (vLLM: ``default_rope_theta``, 1e6 for
    Qwen3, 10000 otherwise): the engine falls back to its config class for the family."""
