"""Reading a checkpoint's config and tensor table through a layout into a :class:`DrafterSpec`.

Split from ``formats/base.py`` (issue 26).  Each value comes from the config, else is derived exactly from
the tensor shapes, else is the layout's own documented default; every value that is not the config's is
reported in the notes, and nothing shape-bearing is ever defaulted silently.  Problems are collected
(:class:`ReadResult`), never raised, so validation can report all of them at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from ... import architectures
from ...architectures.base import Architecture, exact_div as _exact_div, shape_of as _shape
from ...spec.canonical import FC_NORM_NAME, layer_indices
from ...spec.config_types import SHAPE_FIELDS, TOP_LEVEL_TYPES, transformers_type_problems, wanted as _wanted
from ...spec.drafter import AuxConvention, AuxLayers, DrafterSpec, EagleFlags, Rope
from ...io.dtypes import CONFIG_DTYPE_NAMES
from ...io.reader import TensorInfo
from ...rope import ROPE_KEYS, both_spellings
from .fields import MISSING, FromArchitecture, SameAs, get_path
from .renames import map_names, rename
from .speculators_config import SpeculatorsEagle3Config

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from ...support.jsonio import JSONValue
    from . import Layout

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
    aliased: list[str] = field(default_factory=list)  # tensor names read only through the loader's renames
    config: dict[str, Any] = field(default_factory=dict)

    def add_error(self, message: str, code: str) -> None:
        self.errors.append(message)
        self.codes.append(code)

    def problems(self) -> list[tuple[str, str]]:
        """(finding code, message) for each error, in the order found; an error appended without a code is EC003."""
        return [(self.codes[i] if i < len(self.codes) else "EC003", m) for i, m in enumerate(self.errors)]



# asked of the architecture (Architecture.missing): MLA has neither num_key_value_heads nor head_dim
ARCH_SHAPE_FIELDS = frozenset(f for arch in architectures.ARCHITECTURES.values() for f in arch.config_fields)


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



def type_problems(layout: type[Layout], config: Mapping[str, JSONValue]) -> list[tuple[str, str]]:
    """(path, message) for config values of the wrong JSON type, at every path a field is read from.

    null is left to the flag rules (some engines read a present null as false).
    """
    problems = []
    checks: list[tuple[str, object, str | None]] = []
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


def read_fields(layout: type[Layout], config: Mapping[str, JSONValue]) -> tuple[dict[str, Any], set[str]]:
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
        return SpeculatorsEagle3Config  # the one layout with a config model of its own
    arch = architectures.detect(config.get("model_type"), config)
    assert arch is not None  # detection falls back to llama
    return arch.config_model()


def read_drafter(layout: type[Layout], config: Mapping[str, JSONValue], tensors: Mapping[str, TensorInfo],
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
    result.aliased = sorted(n for c, n in canonical_names.items() if rename(layout.renames, c, to_canonical=False) != n)
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

    def derive(key: str, value: object, how: str) -> None:
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


def _short_errors(errors: list[ErrorDetails]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in errors)


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return _short_errors(exc.errors())
    return str(exc)


def _as_bool(value: object, key: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{key} must be true or false, not {value!r}")


def _build_spec(layout: type[Layout], arch: type[Architecture], v: dict[str, Any], t: Mapping[str, TensorInfo],
                aux_convention: AuxConvention | None, config: Mapping[str, JSONValue],
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


def carried_keys(layout: type[Layout], config: Mapping[str, JSONValue]) -> dict[str, Any]:
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

