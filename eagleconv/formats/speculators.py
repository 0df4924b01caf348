"""vLLM speculators' format (``speculators convert``, PyPI speculators 0.9.0).

The decoder's hyper-parameters are nested in ``transformer_layer_config``; the
EAGLE fields are top-level; ``speculators_config`` names the verifier.
``norm_before_residual`` is always written explicitly: vLLM defaults it to
*true* when the key is absent, the speculators library to false.  K is also
written as ``transformer_layer_config.num_aux_hidden_states`` because vLLM's
Llama drafter does not size fc from the top-level ids (vllm#54526).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..architectures.base import InLayout
from ..spec.drafter import DrafterSpec, Verifier
from . import register
from .base import Seen, Layout
from .base.fields import ConfigField, SameAs, get_path, hf_fields

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject


@register
class SpeculatorsLayout(Layout):
    name = "speculators"
    producer = "vLLM speculators"
    description = "Eagle3Speculator, speculators_model_type eagle3, transformer_layer_config, speculators_config"
    holds = {"llama": InLayout(("Eagle3Speculator",)), "qwen3": InLayout(("Eagle3Speculator",))}
    fields = hf_fields(
        decoder="transformer_layer_config.",
        num_aux_hidden_states=ConfigField(("transformer_layer_config.num_aux_hidden_states",)),
        aux_layer_ids=ConfigField(("eagle_aux_hidden_state_layer_ids",)),
        norm_before_fc=ConfigField(("norm_before_fc",)),
        use_aux_hidden_state=None,
    )
    flags = frozenset({"fc_norm", "norm_before_fc", "norm_output", "norm_before_residual"})
    defaults = {"target_hidden_size": SameAs("hidden_size"), "num_aux_hidden_states": 3,
                "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False}
    carries_verifier = True
    # The layout's own structure, not drafter facts: never reported as dropped.  Everything else the
    # source states (proposal_methods, embed_requires_grad...) is reported unless the output keeps it.
    meta_keys = Layout.meta_keys | {"speculators_model_type", "speculators_version", "speculators_config.algorithm",
                                    "speculators_config.default_proposal_method", "speculators_config.verifier",
                                    "auto_map"}

    @classmethod
    def looks_like(cls, seen: Seen):
        config = seen.config
        if config.get("speculators_model_type") == "eagle3":
            return 100, ["config.json speculators_model_type = 'eagle3'"]
        return 0, []

    @classmethod
    def requires_for(cls, spec: DrafterSpec) -> tuple[str, ...]:
        """Under a compressed vocab speculators registers zero-filled d2t/t2d buffers and keeps them unless
        the file has both: a missing t2d fails ``load_verifier_weights`` and every draft token maps wrongly."""
        return ("d2t", "t2d") if spec.compressed_vocab else ()

    @classmethod
    def read_extra(cls, config) -> dict[str, Any]:
        verifier = get_path(config, "speculators_config.verifier")
        if isinstance(verifier, dict):
            archs = verifier.get("architectures") or ()
            return {"verifier": Verifier(name_or_path=verifier.get("name_or_path"),
                                         architectures=tuple(a for a in archs if isinstance(a, str)))}
        return {}

    @classmethod
    def extra_config(cls, spec: DrafterSpec) -> JSONObject:
        return {"speculators_model_type": "eagle3", "speculators_config": speculators_config(spec.verifier or Verifier())}


def speculators_config(verifier: Verifier) -> JSONObject:
    """The ``speculators_config`` block speculators 0.9.0 writes: greedy proposals of 3 tokens, and the verifier.
    One place for it, so the layout's writer and its synthetic recipe (eagleconv.synthetic.speculators) agree."""
    return {
        "algorithm": "eagle3",
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                              "verifier_accept_k": 1, "accept_tolerance": 0.0}],
        "default_proposal_method": "greedy",
        "verifier": {"name_or_path": verifier.name_or_path, "architectures": list(verifier.architectures)},
    }
