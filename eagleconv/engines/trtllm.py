"""TensorRT-LLM's ``Eagle3DraftModel`` (PR #14988, commit 00679c66).

Source: TensorRT-LLM at 00679c66 (its EAGLE-3 draft model and config handling).  TRT-LLM reads ``norm_before_fc``
*only* inside ``eagle_config``; ``norm_output`` at the top level or as
``eagle_config.return_hidden_post_norm``; the number of aux states and the
captured layers come from the runtime option ``eagle3_layers_to_capture``,
not the drafter config.  How its registry maps config architecture names and
what its loader does with unknown names are not modelled.
"""

from __future__ import annotations

from .registry import register
from .base import CaptureRules, DrafterClass, EngineProfile, FlagRule
from .checks import check_aux_count, check_capture, check_flags, check_sharing

TRTLLM = register(EngineProfile(
    engine="trtllm", version="00679c66",
    summary="TensorRT-LLM Eagle3DraftModel with the EAGLE-3.1 switches of PR #14988",
    flags={
        "fc_norm": FlagRule(("fc_norm",)),
        "norm_before_fc": FlagRule(("eagle_config.norm_before_fc",)),
        "norm_output": FlagRule(("norm_output", "eagle_config.return_hidden_post_norm")),
    },
    classes={},
    default_class=DrafterClass("Eagle3DraftModel", family=None, aux_count_paths=(), aux_count_default=None),
    capture=CaptureRules(paths=(), from_runtime="the runtime option eagle3_layers_to_capture"),
    keys=None,
    shares_from_target={"lm_head.weight": "absent", "embed_tokens.weight": "same_width"},
    checks=(check_aux_count, check_capture, check_flags, check_sharing),
    rank=20,
))
