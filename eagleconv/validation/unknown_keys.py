"""EC006: config keys that no reader of the layout uses (a typo reads as "absent", silently).

The keys a reader uses are derived from the tables that already say so: the
layout's config field table (every read and written path), its ``meta_keys``,
the config model of the file (``formats.base.reading.config_model_for``, nested models
included), the architectures' config fields, and every engine profile's flag,
aux-count and capture paths.  What remains is either a known harmless extra
(:data:`HARMLESS`: transformers' bookkeeping, a trainer's own keys), or
reported: a warning, with "did you mean" (difflib) when it is close to a known
key, and an error when the key it is close to changes the drafter's math and is
absent (the reader then uses its default: ``hiden_size`` makes transformers'
AutoConfig read ``hidden_size = 4096``).
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from collections.abc import Iterator, Mapping

from pydantic import BaseModel

from .. import architectures
from ..spec.drafter import EagleFlags
from ..spec.config_types import BOOL_FIELDS, INT_FIELDS, INT_LIST_FIELDS
from ..formats.base import Layout
from ..formats.base.fields import MISSING, get_path
from ..formats.modelopt import MODELOPT_EAGLE_KEYS
from ..spec.report import Finding
from ..rope import ROPE_KEYS

_PRETRAINED = "transformers' PretrainedConfig bookkeeping"
_TRANSFORMERS_4 = "transformers 4.x PretrainedConfig defaults (generation and export switches)"
_LLAMA = "transformers' LlamaConfig (training and generation settings, not the drafter's forward)"

# Keys relative to the top level or to the layout's decoder location (speculators' transformer_layer_config),
# with who writes them.  Checked against transformers' config classes by tests/validation/test_config_keys.py.
HARMLESS: dict[str, str] = {
    **dict.fromkeys(("_name_or_path", "architectures", "chunk_size_feed_forward", "dtype", "torch_dtype", "id2label",
                     "label2id", "is_encoder_decoder", "output_attentions", "output_hidden_states", "problem_type",
                     "return_dict", "transformers_version", "_attn_implementation_autoset", "tokenizer_class",
                     "prefix", "sep_token_id", "decoder_start_token_id", "task_specific_params", "finetuning_task"),
                    _PRETRAINED),
    "quantization_config": "quantization metadata (transformers, ModelOpt exports); the stored dtypes are what is read",
    **dict.fromkeys(("torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "is_decoder",
                     "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "max_length",
                     "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
                     "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
                     "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
                     "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
                     "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
                     "begin_suppress_tokens"), _TRANSFORMERS_4),
    **dict.fromkeys(("attention_dropout", "initializer_range", "pretraining_tp", "use_cache", "bos_token_id",
                     "eos_token_id", "pad_token_id", "tie_word_embeddings"), _LLAMA),
    # each architecture's own (its transformers config class's keys that change nothing in a drafter)
    **{k: why for arch in architectures.ARCHITECTURES.values() for k, why in arch.harmless_config_keys.items()},
    "embed_requires_grad": "speculators' training switch (Eagle3SpeculatorConfig)",
    "has_no_defaults_at_init": "speculators' config bookkeeping",
    **dict.fromkeys(("attn_implementation", "parallel_drafting", "mask_token_id", "pard_token"),
                    "NeMo Automodel's train_eagle3 recipe and its serve_vllm bridge"),
    **{f"eagle_config.{k}": "NVIDIA Model-Optimizer's eagle_config (hf_spec_export.py)" for k in MODELOPT_EAGLE_KEYS},
    "eagle_config.eh_proj_before_attn": "TensorRT-LLM's eagle_config (modeling_speculative.py)",
}

# Keys a reader uses that no field table lists (they reach it through DrafterSpec.extra).
READ_BY_NAME: dict[str, str] = {
    "logit_scale": "vLLM's Llama logits processor and eagleconv's reference forward multiply the logits by it",
}

# Canonical fields that change what the drafter computes: a misspelling of one of them is an error.
MATH_FIELDS = (frozenset(EagleFlags.model_fields) | set(INT_FIELDS) | set(BOOL_FIELDS) | set(INT_LIST_FIELDS)
               | set(ROPE_KEYS) | {"rms_norm_eps", "hidden_act"}) - {"max_position_embeddings"}

CUTOFF = 0.8  # difflib ratio for "did you mean": one or two letters off in a key of ten


def _model_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Dotted paths of a pydantic config model's fields, nested models included (lists are leaves)."""
    for name, info in model.model_fields.items():
        yield prefix + (info.alias or name)
        for arg in _union_members(info.annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _model_paths(arg, f"{prefix}{info.alias or name}.")


def _union_members(annotation: object) -> tuple[object, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


@functools.cache
def _engine_paths() -> dict[str, str]:
    """Top-level config paths some engine profile reads -> the canonical field they set."""
    from ..engines import PROFILES

    out: dict[str, str] = {}
    for profile in PROFILES.values():
        for flag, rule in profile.flags.items():
            out.update(dict.fromkeys(rule.paths, flag))
        classes = [*profile.classes.values(), *([profile.default_class] if profile.default_class else [])]
        for cls in classes:
            for path in cls.aux_count_paths:
                out.setdefault(path, "aux_layer_ids" if "ids" in path else "num_aux_hidden_states")
        capture = [*profile.capture.paths, *(p for p, *_ in profile.capture.some_runners)]
        out.update(dict.fromkeys(capture, "aux_layer_ids"))
    return out


@functools.cache
def _canonical_by_path() -> dict[str, str]:
    """Every layout's field paths (absolute and relative to its decoder) -> canonical field."""
    from ..formats import LAYOUTS

    out: dict[str, str] = {}
    for layout in LAYOUTS.values():
        prefix = layout.decoder_prefix()
        for key, cf in layout.fields.items():
            for path in (*cf.read, *cf.write_paths):
                out.setdefault(path, key)
                if prefix and path.startswith(prefix):
                    out.setdefault(path[len(prefix):], key)
    return out


def known_paths(layout: type[Layout], config: Mapping[str, object]) -> dict[str, str | None]:
    """Config paths some reader of ``layout`` uses -> the canonical field each sets (None: none)."""
    from ..formats.base.reading import config_model_for

    prefix = layout.decoder_prefix()
    canonical = _canonical_by_path()
    known: dict[str, str | None] = {}
    for key, cf in layout.fields.items():
        known.update(dict.fromkeys((*cf.read, *cf.write_paths), key))
    for arch in architectures.ARCHITECTURES.values():
        known.update({prefix + f: f for f in arch.config_fields})
    known.update(_engine_paths())
    try:
        model = config_model_for(dict(config))
    except Exception:  # noqa: BLE001 - an unreadable model_type is EC005's business, not this check's
        model = None
    if model is not None:
        for path in _model_paths(model):
            rel = path[len(prefix):] if prefix and path.startswith(prefix) else path
            known.setdefault(path, canonical.get(path, canonical.get(rel)))
    known.update({prefix + k: None for k in READ_BY_NAME})
    for path in (*layout.meta_keys, *HARMLESS):
        known.setdefault(path, None)
        if prefix and path in HARMLESS:
            known.setdefault(prefix + path, None)
    return known


def _walk(config: Mapping[str, object], known: Mapping[str, str | None], prefix: str = "") -> Iterator[str]:
    """Paths of ``config`` no reader uses; a known key's object is opened only when readers look inside it."""
    for key, value in config.items():
        path = prefix + str(key)
        if isinstance(value, Mapping) and any(k.startswith(path + ".") for k in known):
            yield from _walk(value, known, path + ".")
        elif path not in known:
            yield path


def _suggest(path: str, known: Mapping[str, str | None]) -> str | None:
    """The known path ``path`` most likely means: the same key elsewhere, a close sibling, or a close key elsewhere."""
    parent, _, leaf = path.rpartition(".")
    elsewhere = {k: k.rpartition(".")[2] for k in known if k != path}
    same = sorted((k for k, name in elsewhere.items() if name == leaf), key=len)
    if same:
        return same[0]
    siblings = {name: k for k, name in elsewhere.items() if k.rpartition(".")[0] == parent}
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=CUTOFF)
    if close:
        return siblings[close[0]]
    close = difflib.get_close_matches(leaf, sorted(set(elsewhere.values())), n=1, cutoff=CUTOFF)
    return min((k for k, name in elsewhere.items() if close and name == close[0]), default=None, key=len)


def typo_fixes(layout: type[Layout], config: Mapping[str, object]) -> dict[str, str]:
    """{the key meant: the key written} for each unused key that is a likely typo of an absent key that changes
    the math (the EC006 errors): what the config would say with the typo corrected."""
    known = known_paths(layout, config)
    out: dict[str, str] = {}
    for path in _walk(config, known):
        suggestion = _suggest(path, known)
        # a key holding a dot ("rms_norm.eps", ".rms_norm_eps") has no path to read its value back from
        if suggestion is not None and known[suggestion] in MATH_FIELDS and get_path(config, suggestion) is MISSING \
                and get_path(config, path) is not MISSING:
            out.setdefault(suggestion, path)
    return out


def unknown_key_findings(layout: type[Layout], config: Mapping[str, object]) -> list[Finding]:
    """EC006 for every key of ``config`` that no reader of ``layout`` uses (see the module docstring)."""
    known = known_paths(layout, config)
    out = []
    for path in _walk(config, known):
        suggestion = _suggest(path, known)
        where = f"no reader of the {layout.name} layout (eagleconv, or an engine it profiles) uses config key {path!r}"
        if suggestion is None:
            out.append(Finding(code="EC006", severity="warning", message=f"{where}, so it has no effect"))
            continue
        field = known[suggestion]
        if field in MATH_FIELDS and get_path(config, suggestion) is MISSING:
            out.append(Finding(code="EC006", severity="error", message=(
                f"{where}: did you mean {suggestion!r}? That key is absent, and it sets {field}, which changes what "
                "the drafter computes: every reader that looks for it uses its default or a derived value instead")))
        else:
            out.append(Finding(code="EC006", severity="warning", message=f"{where}: did you mean {suggestion!r}?"))
    return out
