"""SGLang's ``LlamaForCausalLMEagle3``, as of the newer loader (PRs #24620, #24663, #25454, #32334).

Source: SGLang's ``llama_eagle3`` model as those PRs left it.  The exact upstream commit is
unknown (an annotated mirror plus PR threads), hence the version label.
Unknown weight names are skipped silently; legacy ``aux_norm_{low,mid,high}``
names load as ``fc_norm.{0,1,2}``; ``use_aux_norm`` is a synonym of fc_norm;
explicit aux ids get +1 when the first id is 1 (#25454); the drafter's
embed_tokens is always replaced by the target's.  eagleconv knows only part of
SGLang's drafter registry, so an unknown architecture is a warning.
"""

from __future__ import annotations

from .registry import register
from .base import CaptureRules, DrafterClass, EngineProfile, FlagRule, KeyRules
from .checks import COMMON_CHECKS

LLAMA = DrafterClass("LlamaForCausalLMEagle3", family="llama",
                     aux_count_paths=("num_aux_hidden_states", "eagle_config.eagle_aux_hidden_state_layer_ids"))


def plus_one_when_first_is_one(ids: tuple[int, ...]) -> tuple[int, ...]:
    """sglang#25454: ids starting at 1 are read as output-of-layer ids and shifted to input-of-layer."""
    return tuple(i + 1 for i in ids) if ids and ids[0] == 1 else ids


SGLANG = register(EngineProfile(
    engine="sglang", version="post-32334",
    summary="SGLang LlamaForCausalLMEagle3 after #24620/#24663 (multi-layer, fc_norm), #25454 (+1 rule), "
            "#32334 (norm_before_fc)",
    flags={
        "fc_norm": FlagRule(("fc_norm", "use_aux_norm")),
        "norm_before_fc": FlagRule(("norm_before_fc",)),
        "norm_output": FlagRule(("norm_output",)),
    },
    classes={"LlamaForCausalLMEagle3": LLAMA},
    registry_complete=False,
    rejected_architectures={
        "LlamaForCausalLM": "SGLang loads it as a plain Llama model, not an EAGLE-3 drafter (sglang#33966: "
                            "community drafts need repackaged copies declaring LlamaForCausalLMEagle3)",
    },
    capture=CaptureRules(
        paths=("eagle_config.eagle_aux_hidden_state_layer_ids",),
        default="(2, L//2, L-3)", default_ids=lambda L: (2, L // 2, L - 3),
        shift=plus_one_when_first_is_one, shift_rule="sglang#25454 adds 1 when the first id is 1",
    ),
    keys=KeyRules(
        renames=(("midlayer.", "layers.0."), ("aux_norm_low.", "fc_norm.0."), ("aux_norm_mid.", "fc_norm.1."),
                 ("aux_norm_high.", "fc_norm.2.")),
        dropped=("t2d",),
        unknown="ignore",
        unknown_bias="ignore",
    ),
    shares_from_target={"embed_tokens.weight": "always", "lm_head.weight": "absent"},
    checks=COMMON_CHECKS,
    history=("older SGLang (d737979c) had one midlayer, fc of 3 x target_hidden and raised for num_hidden_layers != 1",),
    rank=10,
))
