"""NVIDIA NeMo Automodel (``train_eagle3``): ``model.``-prefixed keys, LlamaEagle3DraftModel.

``lm_head``, ``d2t`` and ``t2d`` stay at the top level; everything else sits
under ``model.``.  Automodel's own serve_vllm bridge strips the prefix, which is
what converting to ``vllm`` does here.
"""

from __future__ import annotations

from ..architectures.base import InLayout, Verdict
from . import register
from .base import Seen, Layout, architectures_of
from .base.renames import Rename
from .base.fields import SameAs, hf_fields


@register
class AutomodelLayout(Layout):
    name = "automodel"
    producer = "NVIDIA NeMo Automodel"
    description = "model.-prefixed keys (lm_head, d2t, t2d unprefixed), LlamaEagle3DraftModel"
    holds = {"llama": InLayout(("LlamaEagle3DraftModel",))}
    verdicts = (Verdict("vllm 0.32", frozenset({"EC003", "EC040"}), "vLLM cannot serve Automodel's raw layout "
                        "(model.-prefixed names, LlamaEagle3DraftModel): that is why Automodel ships serve_vllm"),)
    renames = (
        Rename("lm_head.{rest}", "lm_head.{rest}"),
        Rename("d2t", "d2t"),
        Rename("t2d", "t2d"),
        Rename("model.{rest}", "{rest}"),
    )
    fields = hf_fields(norm_before_fc=None, norm_before_residual=None, use_aux_hidden_state=None)
    flags = frozenset({"fc_norm", "norm_output"})
    defaults = {"target_hidden_size": SameAs("hidden_size"), "num_aux_hidden_states": 3,
                "fc_norm": False, "norm_output": False}

    @classmethod
    def looks_like(cls, seen: Seen):
        config, names = seen.config, seen.names
        if names is None:
            found = "LlamaEagle3DraftModel" in architectures_of(config)
            return (50, ["architectures LlamaEagle3DraftModel"]) if found else (0, [])
        if "model.fc.weight" in names:
            if "LlamaEagle3DraftModel" in architectures_of(config):
                return 50, ["model.-prefixed tensors with architectures LlamaEagle3DraftModel"]
            return 40, ["model.-prefixed tensors (model.fc.weight)"]
        return 0, []
