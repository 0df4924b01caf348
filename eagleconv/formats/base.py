"""What a layout is: a rename table, a config field table, and a few named hooks.

A layout (``specforge``, ``vllm``, ``speculators``...) is a subclass of
:class:`Layout` whose class attributes are data, registered with
``@register``.  Everything generic lives here: turning a layout's tensor names
into canonical names and back (an invertible, first-match rename table),
reading a config into a :class:`DrafterSpec` (config value, else exactly
derived from tensor shapes, else the layout's own documented default; each
non-config value is reported), and writing a spec back out as a config.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from .. import architectures
from ..architectures.base import Architecture, exact_div as _exact_div, shape_of as _shape
from ..canonical import CANONICAL_NAME, FC_NORM_NAME, layer_indices
from ..drafter import AuxConvention, AuxLayers, DrafterSpec, EagleFlags, Rope
from ..io.dtypes import CONFIG_DTYPE_NAMES
from ..io.reader import TensorInfo
from ..rope import ROPE_KEYS, both_spellings

# -- tensor renames -------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{(n|rest)\}")


@functools.cache
def _compile(pattern: str) -> re.Pattern[str]:
    parts, last = [], 0
    for m in _PLACEHOLDER.finditer(pattern):
        parts.append(re.escape(pattern[last:m.start()]))
        parts.append(r"(?P<n>\d+)" if m.group(1) == "n" else r"(?P<rest>.+)")
        last = m.end()
    parts.append(re.escape(pattern[last:]))
    return re.compile("^" + "".join(parts) + "$")


@dataclass(frozen=True)
class Rename:
    """``layout`` name pattern <-> ``canonical`` name pattern.  ``{n}``: an integer, ``{rest}``: the remainder."""

    layout: str
    canonical: str

    def apply(self, name: str, to_canonical: bool) -> str | None:
        pattern, template = (self.layout, self.canonical) if to_canonical else (self.canonical, self.layout)
        m = _compile(pattern).match(name)
        if m is None:
            return None
        return _PLACEHOLDER.sub(lambda p: m.group(p.group(1)), template)


def rename(table: tuple[Rename, ...], name: str, to_canonical: bool) -> str | None:
    """First matching rule wins; None when no rule matches."""
    for rule in table:
        out = rule.apply(name, to_canonical)
        if out is not None:
            return out
    return None


# -- config fields ---------------------------------------------------------------

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


def hf_fields(decoder: str = "", **overrides: ConfigField | None) -> dict[str, ConfigField]:
    """The Hugging Face-style field table, decoder fields under ``decoder`` (a path prefix)."""
    d = decoder
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
        # each architecture's own decoder fields (Architecture.config_fields), in registry order
        **{f: ConfigField((f"{d}{f}",)) for arch in architectures.ARCHITECTURES.values() for f in arch.config_fields},
        "dtype": ConfigField(("torch_dtype", "dtype")),
        "draft_vocab_size": ConfigField(("draft_vocab_size",)),
        "target_hidden_size": ConfigField(("target_hidden_size",)),
        "num_aux_hidden_states": ConfigField(("num_aux_hidden_states",)),
        "aux_layer_ids": ConfigField(("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids")),
        "fc_norm": ConfigField(("fc_norm",)),
        "norm_before_fc": ConfigField(("eagle_config.norm_before_fc", "norm_before_fc")),
        "norm_output": ConfigField(("norm_output",)),
        "norm_before_residual": ConfigField(("norm_before_residual",)),
        "use_aux_hidden_state": ConfigField(("eagle_config.use_aux_hidden_state",)),
    }
    table.update(overrides)
    return {k: v for k, v in table.items() if v is not None}


MISSING = object()  # what get_path returns for an absent path (None is a legal JSON value)


class SameAs(str):
    """A layout default that copies another field (vLLM: target_hidden_size defaults to hidden_size)."""


def get_path(config: Mapping[str, Any], path: str) -> Any:
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


# -- the layout class -------------------------------------------------------------

@dataclass(frozen=True)
class Capability:
    """A canonical tensor a layout cannot store, and what happens to it on the way in.

    ``derive``: dropped silently-but-reported because it is exactly re-derivable
    (t2d from d2t).  ``drop``: information would be lost, so it is dropped only
    when the user names it with ``--drop``.  ``never``: the layout cannot carry
    it at all (conversion is refused).
    """

    pattern: str
    policy: str  # "derive" | "drop" | "never"
    reason: str


@dataclass(frozen=True)
class Seen:
    """What detection looks at: the config, the stored tensor names, and how weights are stored.

    ``names`` is None when only a config is at hand (``eagleconv lint``).
    """

    config: Mapping[str, Any]
    names: set[str] | None
    metadata: Mapping[str, str] = field(default_factory=dict)
    weights_kind: str = "safetensors"


class Layout:
    """Base class of every registered layout.  Subclasses set data, rarely code."""

    name: ClassVar[str]
    producer: ClassVar[str]
    description: ClassVar[str]
    renames: ClassVar[tuple[Rename, ...]] = (Rename("{rest}", "{rest}"),)
    fields: ClassVar[dict[str, ConfigField]] = hf_fields()
    aux_convention: ClassVar[AuxConvention] = "hidden_state_index"
    defaults: ClassVar[dict[str, Any]] = {}
    # Filled from the architectures when the layout is registered (bind_architectures): architecture name ->
    # the config ``architectures`` written for it, and the model_types this layout rewrites.
    architectures: ClassVar[dict[str, tuple[str, ...]]] = {}
    model_types: ClassVar[dict[str, str]] = {}
    flags: ClassVar[frozenset[str]] = frozenset(EagleFlags.model_fields)
    fixed_aux_count: ClassVar[int | None] = None
    max_layers: ClassVar[int | None] = None
    cannot_hold: ClassVar[tuple[Capability, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()
    meta_keys: ClassVar[frozenset[str]] = frozenset({"architectures", "transformers_version", "eagleconv"})
    carries_verifier: ClassVar[bool] = False  # whether the config can name the target model
    # Converting into it needs the target model's metadata (--target): llama.cpp's GGUF carries the target's
    # tokenizer.  Such a layout is a serving format, not a producer's: tests and synthetic drafters skip it.
    needs_target: ClassVar[bool] = False
    # What to do instead, for a drafter this layout refuses: by flag name, "aux_count" or "architecture"
    way_out: ClassVar[dict[str, str]] = {}

    # hooks ------------------------------------------------------------------
    @classmethod
    def detect(cls, seen: Seen) -> tuple[int, list[str]]:
        """How strongly (0 = not at all) the checkpoint is in this layout, and why.

        A checkpoint eagleconv wrote names its layout; anything else is judged
        by ``looks_like`` from the config and the tensor names.
        """
        score, why = marker_score(cls, seen.config)
        return (score, why) if score else cls.looks_like(seen)

    @classmethod
    def looks_like(cls, seen: Seen) -> tuple[int, list[str]]:
        """Layout-specific evidence from config and tensor names (see each layout)."""
        return 0, []

    @classmethod
    def extra_config(cls, spec: DrafterSpec) -> dict[str, Any]:
        """Layout-owned config keys to add when writing (speculators_config...)."""
        return {}

    @classmethod
    def requires_for(cls, spec: DrafterSpec) -> tuple[str, ...]:
        """Canonical tensors this layout's reader needs for ``spec`` (derived exactly when the source lacks them)."""
        return cls.requires

    @classmethod
    def aux_convention_for(cls, architecture: str) -> AuxConvention:
        """Numbering convention of the aux ids this layout stores for ``architecture`` (the architecture may say)."""
        held = architectures.ARCHITECTURES[architecture].layouts.get(cls.name) \
            if architecture in architectures.ARCHITECTURES else None
        return held.aux_convention if held is not None and held.aux_convention else cls.aux_convention  # type: ignore[return-value]

    @classmethod
    def read_extra(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """Layout-owned values read into the spec (the verifier...)."""
        return {}

    # generic machinery ------------------------------------------------------
    @classmethod
    def decoder_prefix(cls) -> str:
        path = cls.fields["hidden_size"].read[0]
        return path[: -len("hidden_size")]

    @classmethod
    def holding_policy(cls, canonical: str) -> Capability | None:
        for cap in cls.cannot_hold:
            if re.fullmatch(cap.pattern, canonical):
                return cap
        return None


def bind_architectures(layout: type[Layout]) -> type[Layout]:
    """Set ``layout.architectures`` and ``layout.model_types`` from what each architecture declares for it.

    The fallback family first, then by name, so listings and messages read the same whatever the import order.
    """
    held = sorted((a for a in architectures.ARCHITECTURES.values() if layout.name in a.layouts),
                  key=lambda a: (not a.fallback, a.name))
    layout.architectures = {a.name: a.layouts[layout.name].classes for a in held}
    layout.model_types = {k: v for a in held for k, v in a.layouts[layout.name].model_types.items()}
    return layout


# -- reading ----------------------------------------------------------------------

@dataclass
class ReadResult:
    """A checkpoint read through a layout: its spec, its canonical names, and what was inferred."""

    layout: type[Layout]
    spec: DrafterSpec | None
    canonical: dict[str, str]  # canonical name -> layout name
    tensors: dict[str, TensorInfo]  # canonical name -> info
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # the finding code of each entry of ``errors``, set where it is found (add_error): EC003 for tensor names the
    # layout cannot map, EC005 for a config that does not describe a valid drafter
    codes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # shape-bearing fields nobody could determine
    consumed: set[str] = field(default_factory=set)  # config paths read into the spec
    config: dict[str, Any] = field(default_factory=dict)

    def add_error(self, message: str, code: str) -> None:
        self.errors.append(message)
        self.codes.append(code)

    def problems(self) -> list[tuple[str, str]]:
        """(finding code, message) for each error, in the order found; an error appended without a code is EC003."""
        return [(self.codes[i] if i < len(self.codes) else "EC003", m) for i, m in enumerate(self.errors)]


DDP_HINT = ("every tensor name starts with 'module.', the prefix DistributedDataParallel adds: save "
            "model.module.state_dict() (or strip the prefix) and convert that")


def ddp_prefixed(names: Iterable[str]) -> bool:
    """All names carry DDP's ``module.`` wrapper prefix (a common way to save a drafter that loads nowhere)."""
    names = list(names)
    return bool(names) and all(n.startswith("module.") for n in names)


def map_names(layout: type[Layout], names: list[str]) -> tuple[dict[str, str], list[str]]:
    """Layout names -> canonical names, with strict accounting.  Returns (canonical->layout, errors)."""
    out: dict[str, str] = {}
    errors: list[str] = [DDP_HINT] if ddp_prefixed(names) else []
    for name in sorted(names):
        canonical = rename(layout.renames, name, to_canonical=True)
        if canonical is None or not CANONICAL_NAME.match(canonical):
            errors.append(f"unmapped tensor {name!r}: no {layout.name} rule maps it to a known drafter tensor")
            continue
        if rename(layout.renames, canonical, to_canonical=False) != name:
            errors.append(f"tensor {name!r} is not a {layout.name} name (its canonical name {canonical!r} is spelled differently there)")
            continue
        if canonical in out:
            errors.append(f"tensors {out[canonical]!r} and {name!r} both map to {canonical!r}")
            continue
        out[canonical] = name
    return out, errors


SHAPE_FIELDS = (
    "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "vocab_size", "draft_vocab_size", "target_hidden_size", "num_aux_hidden_states",
)
# asked of the architecture (Architecture.missing): MLA has neither num_key_value_heads nor head_dim
ARCH_SHAPE_FIELDS = frozenset(f for arch in architectures.ARCHITECTURES.values() for f in arch.config_fields)


class FromArchitecture(str):
    """A layout default each architecture states, as the attribute named (vLLM: ``default_rope_theta``, 1e6 for
    Qwen3, 10000 otherwise): the engine falls back to its config class for the family."""


def _numeric_defaults(layout: type[Layout], arch: type[Architecture], values: dict[str, Any],
                      notes: list[str]) -> tuple[str, ...]:
    """rms_norm_eps and the rope theta: config, else the layout's documented default (reported), else unknown."""
    defaulted = []
    theta_stated = "rope_theta" in values or (isinstance(values.get("rope_parameters"), Mapping)
                                              and "rope_theta" in values["rope_parameters"])
    for key, stated in (("rms_norm_eps", "rms_norm_eps" in values), ("rope_theta", theta_stated)):
        if stated:
            continue
        default = layout.defaults.get(key)
        if isinstance(default, FromArchitecture):
            default = getattr(arch, default)
        if default is None:
            notes.append(f"{key}: absent from config and the {layout.name} layout documents no default "
                         "(unknown; a forward pass needs it)")
            continue
        values[f"default:{key}"] = default
        defaulted.append(key)
        notes.append(f"{key} = {default} (absent from config; the {layout.name} layout defines this default)")
    return tuple(defaulted)


# JSON types engines need; a "64" or 64.0 works in one engine and fails (or is coerced) in another.
INT_FIELDS = SHAPE_FIELDS + ("num_hidden_layers", "max_position_embeddings") + tuple(
    f for arch in architectures.ARCHITECTURES.values() for f in arch.config_fields if f not in SHAPE_FIELDS)
BOOL_FIELDS = ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual", "use_aux_hidden_state",
               "attention_bias", "mlp_bias")
INT_LIST_FIELDS = ("aux_layer_ids",)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# top-level keys every engine reads with a fixed JSON type: key -> (test, what it must be)
TOP_LEVEL_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "architectures": (_is_str_list, "a list of strings"),
    "model_type": (lambda v: isinstance(v, str), "a string"),
    "eagle_config": (lambda v: isinstance(v, dict), "an object"),
    "transformer_layer_config": (lambda v: isinstance(v, dict), "an object"),
    "speculators_config": (lambda v: isinstance(v, dict), "an object"),
}


def _is_float(value: Any) -> bool:
    return isinstance(value, float)


def _is_int_or_none(value: Any) -> bool:
    return value is None or _is_int(value)


# transformers' config classes are strict dataclasses (transformers 5): AutoConfig raises on a value of another
# JSON type, on a null where the class allows none, and on a float field written as an integer ("rms_norm_eps": 1).
# Every engine that reads a drafter config through AutoConfig then fails to load it.  key -> (test, must be).
# Found by the AutoConfig property in tests/test_properties.py; tests/test_rel_parsers.py checks the dtype names
# against torch and AutoConfig.
TRANSFORMERS_MODEL_TYPES = frozenset(t for arch in architectures.ARCHITECTURES.values() for t in arch.transformers_model_types)
HEADS_DIVIDE_HIDDEN = frozenset(t for arch in architectures.ARCHITECTURES.values()
                                for t in arch.transformers_heads_divide_hidden)
TORCH_DTYPE_NAMES = frozenset({
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex64", "cfloat", "complex128",
    "cdouble", "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "uint16", "uint32", "uint64",
    "bool", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"})
LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})  # what drafters could hold
_TORCH_DTYPE = (lambda v: v is None or (isinstance(v, str) and v in TORCH_DTYPE_NAMES),
                'null or a torch dtype name such as "bfloat16"')
TRANSFORMERS_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{key: (lambda v: isinstance(v, bool), "true or false") for key in (
        "tie_word_embeddings", "attention_bias", "mlp_bias", "use_cache", "use_sliding_window")},
    **{key: (_is_int, "an integer") for key in ("max_position_embeddings", "max_window_layers")},
    **{key: (_is_float, "a number written with a decimal point or an exponent") for key in (
        "rms_norm_eps", "initializer_range")},
    **{key: (_is_int_or_none, "null or an integer") for key in (
        "bos_token_id", "pad_token_id", "pretraining_tp", "sliding_window")},
    "eos_token_id": (lambda v: _is_int_or_none(v) or (isinstance(v, list) and all(_is_int(i) for i in v)),
                     "null, an integer or a list of integers"),
    "attention_dropout": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    "hidden_act": (lambda v: isinstance(v, str), "a string"),
    "id2label": (lambda v: v is None or isinstance(v, dict), "null or an object"),
    "layer_types": (lambda v: v is None or (isinstance(v, list) and all(t in LAYER_TYPES for t in v)),
                    f"null or a list of {', '.join(sorted(LAYER_TYPES))}"),
    "torch_dtype": _TORCH_DTYPE,
    "dtype": _TORCH_DTYPE,
}


def transformers_type_problems(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path, message) for values transformers' AutoConfig refuses, when it is the reader of this config."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in TRANSFORMERS_MODEL_TYPES \
            or "speculators_model_type" in config:
        return []
    problems = []
    for key, (test, must_be) in TRANSFORMERS_TYPES.items():
        if key in config and not test(config[key]):
            value = config[key]
            problems.append((key, f"config does not describe a valid drafter: {key} is {json.dumps(value)} "
                             f"({type(value).__name__}), not {must_be}; transformers' AutoConfig refuses it, so "
                             "every engine that loads the config through transformers fails"))
    head_dim = config.get("head_dim")
    if isinstance(head_dim, int) and _is_int(head_dim) and head_dim % 2:
        problems.append(("head_dim", f"config does not describe a valid drafter: head_dim is {head_dim}, odd; "
                         "transformers' AutoConfig refuses it (RoPE needs an even rotary dimension)"))
    layer_types, layers = config.get("layer_types"), config.get("num_hidden_layers")
    if isinstance(layer_types, list) and _is_int(layers) and len(layer_types) != layers:
        problems.append(("layer_types", f"config does not describe a valid drafter: layer_types lists "
                         f"{len(layer_types)} layer(s) where num_hidden_layers is {layers}; transformers' "
                         "AutoConfig refuses it"))
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if model_type in HEADS_DIVIDE_HIDDEN and isinstance(hidden, int) and isinstance(heads, int) \
            and _is_int(hidden) and _is_int(heads) and heads > 0 and hidden % heads:
        problems.append(("num_attention_heads", f"config does not describe a valid drafter: hidden_size {hidden} is "
                         f"not a multiple of num_attention_heads {heads}; transformers 5's {model_type} config "
                         "refuses it (even beside an explicit head_dim), so every engine that loads the config "
                         "through transformers fails"))
    return problems


def type_problems(layout: type[Layout], config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path, message) for config values of the wrong JSON type, at every path a field is read from.

    null is left to the flag rules (some engines read a present null as false).
    """
    problems = []
    checks: list[tuple[str, Any, str | None]] = []
    for key, (test, must_be) in TOP_LEVEL_TYPES.items():
        if key in config and config[key] is not None and not test(config[key]):
            checks.append((key, config[key], must_be))
    for key, cf in layout.fields.items():
        for path in cf.read:
            value = get_path(config, path)
            if value is MISSING or value is None or path in TOP_LEVEL_TYPES:
                continue
            checks.append((path, value, _wanted(key, value)))
    for path, value, want in checks:
        if want is not None:
            problems.append((path, f"config does not describe a valid drafter: {path} is {json.dumps(value)} "
                             f"({type(value).__name__}), not {want}; engines differ on such a value (some coerce "
                             "it, some fail at load, a string flag reads as true), so it is never coerced silently"))
    reported = {path for path, _ in problems}
    return problems + [(path, m) for path, m in transformers_type_problems(config) if path not in reported]


def _wanted(key: str, value: Any) -> str | None:
    """What a canonical field's value must be, when ``value`` is not that; None when it is fine."""
    if key in INT_FIELDS and not _is_int(value):
        return "an integer"
    if key in BOOL_FIELDS and not isinstance(value, bool):
        return "true or false"
    if key in INT_LIST_FIELDS and not (isinstance(value, list) and all(_is_int(v) for v in value)):
        return "a list of integers"
    if key == "model_type" and not isinstance(value, str):
        return "a string"
    return None


def read_fields(layout: type[Layout], config: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Canonical field values present in ``config`` (absent fields are simply missing)."""
    values: dict[str, Any] = {}
    consumed: set[str] = set()
    for key, cf in layout.fields.items():
        for path in cf.read:
            consumed.add(path)
            value = get_path(config, path)
            if value is not MISSING and key not in values:
                values[key] = value
    return values, consumed


def config_model_for(config: dict[str, Any]) -> type[BaseModel]:
    """The schema a config.json should satisfy: speculators' own, else its architecture's config model."""
    if "speculators_model_type" in config:
        from .speculators import SpeculatorsEagle3Config  # the one layout with a config model of its own

        return SpeculatorsEagle3Config
    arch = architectures.detect(config.get("model_type"), config)
    assert arch is not None  # detection falls back to llama
    return arch.config_model()


def read_drafter(layout: type[Layout], config: Mapping[str, Any], tensors: Mapping[str, TensorInfo],
                 *, aux_convention: AuxConvention | None = None) -> ReadResult:
    """Read a checkpoint's config and tensor table through ``layout`` into a DrafterSpec.

    Never raises for problems in the checkpoint: they are collected in
    ``errors`` and ``missing`` so validation can report all of them at once.
    """
    canonical_names, errors = map_names(layout, list(tensors))
    by_canonical = {c: tensors[n] for c, n in canonical_names.items()}
    values, consumed = read_fields(layout, config)
    result = ReadResult(layout, None, canonical_names, by_canonical, consumed=consumed, config=dict(config))
    for message in errors:
        result.add_error(message, "EC003")
    mistyped = type_problems(layout, config)
    for _, message in mistyped:
        result.add_error(message, "EC005")
    notes = result.notes
    try:
        config_model_for(dict(config)).model_validate(dict(config))
    except ValidationError as exc:
        reported = {path for path, _ in mistyped}
        rest = [e for e in exc.errors() if ".".join(str(p) for p in e["loc"]) not in reported]
        if rest:
            result.add_error(f"config does not describe a valid drafter: {_short_errors(rest)}", "EC005")
        return result

    def derive(key: str, value: Any, how: str) -> None:
        if key not in values and value is not None:
            values[key] = value
            notes.append(f"{key} = {value} ({how})")

    def default(key: str) -> None:
        if key in values or key not in layout.defaults:
            return
        value = layout.defaults[key]
        if isinstance(value, SameAs):
            if value not in values:
                return
            value = values[value]
        values[key] = value
        if key in SHAPE_FIELDS:
            notes.append(f"{key} = {value} (absent from config; the {layout.name} layout defines this default)")

    t = by_canonical
    names = set(t)
    model_type = values.get("model_type")
    arch = architectures.detect(model_type, values, names)
    assert arch is not None  # detection falls back to llama
    if model_type is None:
        values["model_type"] = arch.default_model_type
        notes.append(f"model_type = {values['model_type']} (absent from config; inferred from the tensors)")

    derive("hidden_size", _shape(t, "norm.weight", 0), "from norm.weight")
    derive("hidden_size", _shape(t, "fc.weight", 0), "from fc.weight")
    arch.derive_mlp(t, values, derive)
    derive("vocab_size", _shape(t, "embed_tokens.weight", 0), "from embed_tokens.weight")
    derive("vocab_size", _shape(t, "t2d", 0), "from t2d")
    derive("draft_vocab_size", _shape(t, "lm_head.weight", 0), "from lm_head.weight")
    derive("draft_vocab_size", _shape(t, "d2t", 0), "from d2t")
    arch.derive(t, values, derive)
    if "num_hidden_layers" not in values and (layers := layer_indices(names)):
        derive("num_hidden_layers", len(layers), "counted from the layer tensors")

    # Aux hidden states: K and the target width are tied through fc's input width.
    ids = values.get("aux_layer_ids")
    if layout.fixed_aux_count is not None:
        derive("num_aux_hidden_states", layout.fixed_aux_count, f"fixed by the {layout.name} layout")
    if isinstance(ids, list) and ids:
        derive("num_aux_hidden_states", len(ids), "number of aux layer ids")
    fc_norms = [int(m.group(1)) for n in names if (m := FC_NORM_NAME.match(n))]
    if fc_norms:
        derive("num_aux_hidden_states", max(fc_norms) + 1, "number of fc_norm tensors")
        derive("target_hidden_size", _shape(t, "fc_norm.0.weight", 0), "from fc_norm.0.weight")
    fc_in = _shape(t, "fc.weight", 1)
    derive("target_hidden_size", _exact_div(fc_in, values.get("num_aux_hidden_states")), "fc input width / K")
    derive("num_aux_hidden_states", _exact_div(fc_in, values.get("target_hidden_size")), "fc input width / target_hidden_size")
    default("target_hidden_size")
    derive("num_aux_hidden_states", _exact_div(fc_in, values.get("target_hidden_size")), "fc input width / target_hidden_size")
    default("num_aux_hidden_states")
    derive("target_hidden_size", _exact_div(fc_in, values.get("num_aux_hidden_states")), "fc input width / K")
    for key in ("hidden_act", "norm_before_residual", "fc_norm", "norm_before_fc", "norm_output", "use_aux_hidden_state"):
        default(key)
    defaulted = _numeric_defaults(layout, arch, values, notes)

    result.missing = [k for k in SHAPE_FIELDS if k not in values and k not in ARCH_SHAPE_FIELDS]
    result.missing += arch.missing(values)
    if "num_hidden_layers" not in values:
        result.missing.append("num_hidden_layers")
    if result.missing:
        return result

    try:
        result.spec = _build_spec(layout, arch, values, t, aux_convention, config, defaulted)
        result.notes += [f"{key} is not a rope parameter eagleconv models; ignored" for key in result.spec.rope.ignored_keys]
    except (ValidationError, ValueError, TypeError) as exc:
        if not mistyped:  # otherwise the mistyped value is the cause, already reported
            result.add_error(f"config does not describe a valid drafter: {_short(exc)}", "EC005")
    return result


def _short_errors(errors: list[Any]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in errors)


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return _short_errors(exc.errors())
    return str(exc)


def _as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{key} must be true or false, not {value!r}")


def _build_spec(layout: type[Layout], arch: type[Architecture], v: dict[str, Any], t: Mapping[str, TensorInfo],
                aux_convention: AuxConvention | None, config: Mapping[str, Any],
                defaulted: tuple[str, ...] = ()) -> DrafterSpec:
    ids = v.get("aux_layer_ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        raise ValueError(f"aux layer ids must be a list of integers, not {ids!r}")
    aux = AuxLayers(
        count=v["num_aux_hidden_states"],
        ids=tuple(ids) if ids else None,
        convention=(aux_convention or layout.aux_convention_for(arch.name)) if ids else None,
    )
    flags = EagleFlags(**{k: _as_bool(v[k], k) for k in EagleFlags.model_fields if k in v})
    float_dtypes = [i.dtype for i in t.values() if i.dtype in CONFIG_DTYPE_NAMES]
    dtype = max(set(float_dtypes), key=float_dtypes.count) if float_dtypes else None
    stated_rope = {k: v[k] for k in ROPE_KEYS if k in v}
    rope = Rope.from_config(stated_rope, interleaved=arch.rope_interleaved, theta=v.get("default:rope_theta"))
    # Kept in both spellings, equal (transformers 4.x reads one, 5.x the other), so every output states it
    # the same way to every reader and a round trip through any layout gives the same spec.
    rope = rope.model_copy(update={"stated": both_spellings(stated_rope)})
    eps = v.get("rms_norm_eps", v.get("default:rms_norm_eps"))
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, int | float)):
        raise ValueError(f"rms_norm_eps must be a number, not {eps!r}")
    extra = layout.read_extra(config)
    return DrafterSpec(
        architecture=arch.name,
        model_type=v["model_type"],
        hidden_size=v["hidden_size"],
        num_hidden_layers=v["num_hidden_layers"],
        num_attention_heads=v["num_attention_heads"],
        **arch.spec_fields(v),
        intermediate_size=v["intermediate_size"],
        hidden_act=v.get("hidden_act", "silu"),
        rms_norm_eps=float(eps) if eps is not None else None,
        target_hidden_size=v["target_hidden_size"],
        vocab_size=v["vocab_size"],
        draft_vocab_size=v["draft_vocab_size"],
        aux=aux,
        flags=flags,
        embed_tokens="drafter" if "embed_tokens.weight" in t else "target",
        lm_head="drafter" if "lm_head.weight" in t else "target",
        dtype=dtype,
        rope=rope,
        max_position_embeddings=v.get("max_position_embeddings"),
        attention_bias=bool(v.get("attention_bias", False)),
        mlp_bias=bool(v.get("mlp_bias", False)),
        verifier=extra.get("verifier"),
        extra=carried_keys(layout, config),
        defaulted=defaulted,
    )


def carried_keys(layout: type[Layout], config: Mapping[str, Any]) -> dict[str, Any]:
    """Config keys no field reads and the layout does not own: carried through unchanged.

    Keys are relative to the layout's decoder location (the top level, or
    speculators' ``transformer_layer_config``), so a key carried out of one
    layout lands in the decoder location of the next.  Unread ``eagle_config``
    entries are kept as ``eagle_config.KEY``.
    """
    consumed = {p for cf in layout.fields.values() for p in cf.read}
    prefix = layout.decoder_prefix()
    decoder = get_path(config, prefix[:-1]) if prefix else config
    out: dict[str, Any] = {}
    if not isinstance(decoder, Mapping):
        return out
    for key, value in decoder.items():
        if prefix + key in consumed or key in layout.meta_keys:
            continue
        if key == "eagle_config" and isinstance(value, Mapping):
            out.update({f"eagle_config.{k}": v for k, v in value.items() if f"{prefix}eagle_config.{k}" not in consumed})
            continue
        out[key] = value
    return out


# -- writing ----------------------------------------------------------------------



def spec_values(layout: type[Layout], spec: DrafterSpec) -> dict[str, Any]:
    """Canonical field values of ``spec`` as ``layout`` writes them (aux ids in its convention)."""
    v: dict[str, Any] = {
        "model_type": layout.model_types.get(spec.model_type, spec.model_type),
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "intermediate_size": spec.intermediate_size,
        "hidden_act": spec.hidden_act,
        "rms_norm_eps": None if "rms_norm_eps" in spec.defaulted else spec.rms_norm_eps,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "attention_bias": spec.attention_bias or None,  # written only when on: every engine defaults to off
        "mlp_bias": spec.mlp_bias or None,
        "dtype": CONFIG_DTYPE_NAMES.get(spec.dtype or ""),
        "draft_vocab_size": spec.draft_vocab_size,
        "target_hidden_size": spec.target_hidden_size,
        "num_aux_hidden_states": spec.aux.count,
        "aux_layer_ids": list(ids) if (ids := spec.aux.ids_as(layout.aux_convention_for(spec.architecture))) is not None else None,
        **spec.rope.stated,  # both spellings, equal (see _build_spec)
        **spec.flags.model_dump(),
        **architectures.get(spec.architecture).config_values(spec),
    }
    return {k: val for k, val in v.items() if val is not None}


def write_config(layout: type[Layout], spec: DrafterSpec, provenance: dict[str, Any]) -> dict[str, Any]:
    """Render ``spec`` as ``layout``'s config.json (every synonym path the layout lists is written)."""
    config: dict[str, Any] = {"architectures": list(layout.architectures[spec.architecture])}
    values = spec_values(layout, spec)
    for key, cf in layout.fields.items():
        if key in values:
            for path in cf.write_paths:
                set_path(config, path, values[key])
    prefix = layout.decoder_prefix()
    for rel, value in spec.extra.items():
        if get_path(config, prefix + rel) is MISSING:
            set_path(config, prefix + rel, value)
    for key, value in layout.extra_config(spec).items():
        config[key] = value
    config["eagleconv"] = provenance
    return config


# -- detection helpers ------------------------------------------------------------

def architectures_of(config: Mapping[str, Any]) -> list[str]:
    archs = config.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def has_prefix(names: set[str], prefix: str) -> bool:
    return any(n.startswith(prefix) for n in names)


def marker_score(layout: type[Layout], config: Mapping[str, Any]) -> tuple[int, list[str]]:
    """Checkpoints written by eagleconv name their layout in config['eagleconv']['layout']."""
    stamp = config.get("eagleconv")
    if isinstance(stamp, Mapping) and stamp.get("layout") == layout.name:
        return 1000, [f"config.json eagleconv.layout = {layout.name!r} (written by eagleconv)"]
    return 0, []
