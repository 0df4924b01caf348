"""lightseekorg/tokenspeed's ``llama_eagle3`` (commit f4d8ec6e, with PRs #526, #751, #795).

Source: tokenspeed at f4d8ec6e, its ``llama_eagle3`` model.  Flags are read at the top level
only; K is the length of the top-level aux ids (else 3); fc is built as
``hidden_size x K`` and each fc_norm has ``hidden_size`` rows, so
``target_hidden_size`` is ignored; unknown weight names are skipped silently.
"""

from __future__ import annotations

from ..spec.report import Finding
from .registry import register
from .base import CaptureRules, DrafterClass, EngineProfile, EngineView, FlagRule, KeyRules, Subject
from .checks import COMMON_CHECKS, emits, finding


@emits("EC050")
def check_fc_width_ignores_target_hidden(subject: Subject, view: EngineView) -> list[Finding]:
    """tokenspeed sizes fc and fc_norm from hidden_size, so a drafter with target_hidden != hidden cannot load."""
    spec = subject.spec
    if spec is None or spec.target_hidden_size == spec.hidden_size:
        return []
    k = view.aux_count or spec.aux.count
    return [finding(view, "EC050", "error", f"{view.profile.label} builds fc as [{spec.hidden_size}, "
                    f"{spec.hidden_size} x {k}] (it ignores target_hidden_size = {spec.target_hidden_size}), "
                    f"but this drafter's fc is [{spec.hidden_size}, {spec.target_hidden_size} x {spec.aux.count}]",
                    "fc.weight" if subject.has_tensors else None, effect="load_fails")]


TOKENSPEED = register(EngineProfile(
    engine="tokenspeed", version="f4d8ec6e",
    summary="tokenspeed llama_eagle3 / Eagle3MlaModel with fc_norm and norm_output (#751, #795)",
    flags={
        "fc_norm": FlagRule(("fc_norm",)),
        "norm_before_fc": FlagRule(("norm_before_fc",)),
        "norm_output": FlagRule(("norm_output",)),
    },
    classes={},
    default_class=DrafterClass("LlamaForCausalLMEagle3", family=None, aux_count_paths=("eagle_aux_hidden_state_layer_ids",)),
    capture=CaptureRules(
        paths=("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids"),
        default="(2, L//2, L-3)", default_ids=lambda L: (2, L // 2, L - 3),
    ),
    keys=KeyRules(renames=(("midlayer.", "layers.0."),), dropped=("t2d",), unknown="ignore"),
    shares_from_target={"lm_head.weight": "absent"},
    checks=(*COMMON_CHECKS, check_fc_width_ignores_target_hidden),
    rank=30,
))
