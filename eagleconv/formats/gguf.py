"""llama.cpp's EAGLE-3 draft GGUF (architecture ``eagle3``, llama.cpp b11434, ``src/models/eagle3.cpp``).

One file: metadata keys plus tensors.  The table below is the layout's tensors: canonical tensor name <-> GGUF
tensor name (llama.cpp's converter, ``conversion/llama.py``).  The keys, and reading them into an HF-style config
so the rest of eagleconv sees a drafter like any other, are :mod:`eagleconv.gguf.gguf_keys`; the layout's writer
(``output``) is :class:`eagleconv.gguf.gguf_output.GgufOutput`, which also applies llama.cpp's storage rules.

What llama.cpp cannot hold is refused with the way out: per-layer ``fc_norm`` and ``norm_output``
(EAGLE-3.1), an aux count other than 3, a decoder other than llama's (MLA, Qwen3's q/k norms, Phi-3's
fused projections).  Its ``norm_before_fc`` is one RMSNorm over the concatenated features
(``enc.output_norm.weight``).  Aux ids are llama.cpp's ``eagle3.target_layers``: the *input* of target
layer id (``llama_set_embeddings_layer_inp``), vLLM's numbering.
"""

from __future__ import annotations

from ..gguf.gguf_keys import ARCH
from ..gguf.gguf_output import GgufOutput
from . import register
from .base import Capability, Layout, Seen
from .base.fields import ConfigField, hf_fields
from .base.renames import Rename
from ..architectures.base import InLayout

LLAMACPP_BUILD = "b11434"

TENSORS: tuple[tuple[str, str], ...] = (  # GGUF name, canonical name
    ("token_embd.weight", "embed_tokens.weight"),
    ("fc.weight", "fc.weight"),
    ("enc.output_norm.weight", "input_norm.weight"),
    ("blk.{n}.attn_norm.weight", "layers.{n}.input_layernorm.weight"),
    ("blk.{n}.attn_norm_2.weight", "layers.{n}.hidden_norm.weight"),
    ("blk.{n}.attn_q.weight", "layers.{n}.self_attn.q_proj.weight"),
    ("blk.{n}.attn_k.weight", "layers.{n}.self_attn.k_proj.weight"),
    ("blk.{n}.attn_v.weight", "layers.{n}.self_attn.v_proj.weight"),
    ("blk.{n}.attn_output.weight", "layers.{n}.self_attn.o_proj.weight"),
    ("blk.{n}.ffn_norm.weight", "layers.{n}.post_attention_layernorm.weight"),
    ("blk.{n}.ffn_gate.weight", "layers.{n}.mlp.gate_proj.weight"),
    ("blk.{n}.ffn_up.weight", "layers.{n}.mlp.up_proj.weight"),
    ("blk.{n}.ffn_down.weight", "layers.{n}.mlp.down_proj.weight"),
    ("output_norm.weight", "norm.weight"),
    ("output.weight", "lm_head.weight"),
    ("d2t", "d2t"),
)

# The way out, said once per refusal (conversion.plan.refusal groups the problems it answers).  downgrade and upgrade
# name the target GGUF --gguf-target: their --target is the HF model they measure the change on.
WAY_OUT_31 = ("llama.cpp has no per-layer fc_norm or norm_output (EAGLE-3.1); next: `eagleconv downgrade SRC DST "
              "--to gguf --gguf-target TARGET --allow-lossy` (--gguf-target: downgrade's name for convert's --target; "
              "it measures what removing them costs), or from the EAGLE-3 original `eagleconv upgrade EAGLE3_SRC DST "
              "--style norm_before_fc --no-norm-output --to gguf --gguf-target TARGET` (llama.cpp's one-norm 3.1 style)")


@register
class GgufLayout(Layout):
    name = "gguf"
    producer = f"llama.cpp {LLAMACPP_BUILD} (convert_hf_to_gguf.py)"
    description = "one .gguf file, architecture eagle3: blk.0.*, fc, enc.output_norm, d2t as absolute target ids"
    holds = {"llama": InLayout(("eagle3",))}  # llama.cpp's general.architecture
    renames = tuple(Rename(gguf_name, canonical) for gguf_name, canonical in TENSORS)
    fields = hf_fields(aux_layer_ids=ConfigField(("eagle_aux_hidden_state_layer_ids",)),
                       norm_before_fc=ConfigField(("norm_before_fc",)), use_aux_hidden_state=None,
                       num_aux_hidden_states=None, fc_norm=None, norm_output=None)
    aux_convention = "hidden_state_index"
    flags = frozenset({"norm_before_fc", "norm_before_residual"})
    fixed_aux_count = 3
    max_layers = 1
    defaults = {"norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
                "use_aux_hidden_state": True}
    cannot_hold = (
        Capability("t2d", "derive", "llama.cpp reads no t2d (it is d2t's inverse)"),
        Capability(r"fc_norm\.\d+\.weight", "never", WAY_OUT_31),
        Capability(r"fc\.bias", "never", "llama.cpp's eagle3 fc has no bias"),
        Capability(r"layers\.\d+\.(?:self_attn|mlp)\..*\.bias", "never", "llama.cpp's eagle3 layer has no biases"),
    )
    requires = ()
    needs_target = True
    output = GgufOutput
    meta_keys = Layout.meta_keys | {"gguf_architecture"}
    # Way out for what _compat_problems finds, by flag or limit
    way_out = {
        "fc_norm": WAY_OUT_31, "norm_output": WAY_OUT_31,
        "aux_count": "llama.cpp's eagle3 reads exactly 3 target layers (eagle3.target_layers); a drafter trained on "
                     "another count cannot be served by it",
        "architecture": "llama.cpp's eagle3 graph is a llama decoder layer (no MLA, no q/k norms, no fused "
                        "projections); serve this drafter with vLLM or SGLang",
    }

    @classmethod
    def looks_like(cls, seen: Seen):
        if seen.weights_kind == "gguf":
            arch = seen.config.get("gguf_architecture")
            if arch == ARCH:
                return 1000, ["a GGUF file with general.architecture = 'eagle3'"]
            return 0, []
        return 0, []

    @classmethod
    def requires_for(cls, spec):
        # a compressed draft vocab needs d2t: without it llama.cpp takes the draft vocab to be the target's
        return ("d2t",) if spec.compressed_vocab else ()
