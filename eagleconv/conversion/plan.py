"""The conversion plan: every source tensor to exactly one destination tensor, or dropped by a named rule.

Split from ``conversion.py`` (issue 26).  Planned from headers and small vectors only: what the destination
layout cannot express is refused (with the way out where there is one), a tensor it needs and the source
lacks is derived only when that is exact (t2d from d2t), and every config field that does not reach the
destination is listed in the report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .._version import __version__
from ..spec.canonical import BUFFER_NAME, layer_indices
from ..spec.drafter import EAGLE31_FLAGS, AuxConvention, AuxLayers, DrafterSpec, Verifier
from ..errors import ConversionError, FindingsError, UsageError
from ..formats import get_layout
from ..formats.base import Layout
from ..formats.base.fields import MISSING, get_path
from ..formats.base.renames import rename
from ..formats.base.writing import write_config
from ..io.durable import write_all
from ..io.writer import OutputTensor
from ..readers.loading import LoadedDrafter
from ..spec.report import ConvertReport, Finding, PlanRow
from ..spec.verifier import resolve_verifier
from ..spec.vocab import check_d2t, identity_d2t, t2d_from_target_ids
from .transform import Transform

Problem = tuple[str, str]  # what the destination cannot take, and why / the way out ("" when nothing to add)

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject


def _short_name(canonical: str) -> str:
    """``embed_tokens.weight`` -> ``embed_tokens``: the name users pass to --drop."""
    return canonical[: -len(".weight")] if canonical.endswith(".weight") else canonical


def _matches_drop(canonical: str, layout_name: str, drop: set[str]) -> bool:
    short = _short_name(canonical)
    return bool({canonical, layout_name, short, short.split(".")[0]} & drop)


def _bytes_writer(data: bytes) -> Callable[[int], None]:
    return functools.partial(write_all, data=data)


def _copy_writer(loaded: LoadedDrafter, name: str) -> Callable[[int], None]:
    return lambda fd: loaded.store.copy_into(name, fd)


def _compat_problems(dst: type[Layout], spec: DrafterSpec, layer_count: int) -> list[Problem]:
    """What the destination layout cannot express about this drafter, each with its way out ("" when none)."""
    problems: list[Problem] = []

    def way_out(key: str) -> str:
        return dst.way_out.get(key, "")
    if spec.architecture not in dst.architectures:
        problems.append((f"the {dst.name} layout cannot carry a {spec.architecture} drafter "
                         f"(it holds: {', '.join(dst.architectures)})", way_out("architecture")))
    for flag, info in type(spec.flags).model_fields.items():
        value, default = getattr(spec.flags, flag), info.default
        if value != default and flag not in dst.flags:
            problems.append((f"the {dst.name} layout cannot express {flag} = {str(value).lower()}", way_out(flag)))
    if dst.fixed_aux_count is not None and spec.aux.count != dst.fixed_aux_count:
        problems.append((f"the {dst.name} layout has exactly {dst.fixed_aux_count} aux hidden states; "
                         f"this drafter has {spec.aux.count}", way_out("aux_count")))
    if dst.max_layers is not None and layer_count > dst.max_layers:
        problems.append((f"the {dst.name} layout holds {dst.max_layers} decoder layer(s); this drafter has "
                         f"{layer_count}", ""))
    return problems


def refusal(problems: Sequence[Problem]) -> str:
    """One line for every problem, each reason (way out) said once, after the problems it answers.

    A 3.1 drafter's five problems for GGUF (two flags, three ``fc_norm`` tensors) share one way out: it used to be
    repeated five times in a ~2,000-character line (issue 35 item 7).  Problems with the same reason are joined,
    flags of one layout read as one list ("cannot express fc_norm = true, norm_output = true")."""
    groups: dict[str, list[str]] = {}
    for what, why in problems:
        groups.setdefault(why, []).append(what)
    parts = []
    for why, whats in groups.items():
        phrases: list[str] = []
        for what in (w for w in whats if " " in w):
            head, sep, tail = what.rpartition(" cannot express ")
            if sep and phrases and phrases[-1].startswith(head + sep):
                phrases[-1] += f", {tail}"
            else:
                phrases.append(what)
        names = [w for w in whats if " " not in w]  # tensor names
        parts.append("; ".join(phrases + ([", ".join(names)] if names else [])) + (f" ({why})" if why else ""))
    return "; ".join(parts)


def _downgrade_hint(dst: type[Layout], spec: DrafterSpec, transform: Transform | None) -> str:
    """The way out when only the EAGLE-3.1 flags keep a plain convert from ``dst``: ``eagleconv downgrade``."""
    lacks = [f for f in EAGLE31_FLAGS if getattr(spec.flags, f) and f not in dst.flags]
    if transform is not None or not lacks or spec.architecture not in dst.architectures:
        return ""
    return (f". The {dst.name} layout holds EAGLE-3 only: `eagleconv downgrade SRC DST --to {dst.name}` makes an "
            "EAGLE-3 drafter of this EAGLE-3.1 one (folding fc_norm into fc; --allow-lossy where that changes the math)")


def plan_conversion(loaded: LoadedDrafter, to: str, *, drop: Iterable[str] = (),
                    aux_layer_ids: Sequence[int] | None = None,
                    aux_convention: AuxConvention = "hidden_state_index",
                    transform: Transform | None = None,
                    verifier: str | Verifier | None = None) -> tuple[ConvertReport, list[OutputTensor], dict]:
    """Plan a conversion from headers and small vectors (plus ``transform``'s computed tensors).

    See :func:`_plan`, which also returns the destination's spec."""
    report, out, config, _ = _plan(loaded, to, drop=drop, aux_layer_ids=aux_layer_ids, aux_convention=aux_convention,
                                   transform=transform, verifier=verifier)
    return report, out, config


def _plan(loaded: LoadedDrafter, to: str, *, drop: Iterable[str] = (),
          aux_layer_ids: Sequence[int] | None = None,
          aux_convention: AuxConvention = "hidden_state_index",
          transform: Transform | None = None,
          verifier: str | Verifier | None = None) -> tuple[ConvertReport, list[OutputTensor], dict, DrafterSpec]:
    """Plan a conversion from headers and small vectors (plus ``transform``'s computed tensors).

    Raises ConversionError when the layout change cannot be exact.  ``verifier`` (``--verifier``):
    the target model to name in the output, a Hub id or a local model directory; it replaces
    whatever the source names.
    """
    dst = get_layout(to)
    try:
        spec = loaded.require_spec()
    except FindingsError as exc:
        raise ConversionError(exc.message, exc.path) from exc
    read = loaded.read
    drop_set = set(drop)
    problems: list[Problem] = []
    notes = [f"source read as {loaded.layout.name} ({'; '.join(loaded.detected_by)})"] + read.notes + loaded.store.notes

    if aux_layer_ids is not None:
        ids = tuple(int(i) for i in aux_layer_ids)
        if len(ids) != spec.aux.count:
            raise UsageError(f"--aux-layer-ids gives {len(ids)} ids for {spec.aux.count} aux hidden states")
        old = spec.aux.ids_as(aux_convention)
        spec = spec.model_copy(update={"aux": AuxLayers(count=spec.aux.count, ids=ids, convention=aux_convention)})
        notes.append(f"aux layer ids set to {list(ids)} ({aux_convention}) by --aux-layer-ids"
                     + (f", replacing {list(old)}" if old else ""))
    computed = transform.computed if transform is not None else {}
    removed = transform.removed if transform is not None else {}
    if transform is not None:
        spec = transform.spec
        notes += transform.notes

    if verifier is not None:
        named = resolve_verifier(verifier) if isinstance(verifier, str) else verifier
        old_name = spec.verifier.name_or_path if spec.verifier else None
        spec = spec.model_copy(update={"verifier": named})
        notes.append(f"verifier set to {named.name_or_path!r}"
                     + (f" (architectures {list(named.architectures)})" if named.architectures else
                        " (a Hub id: architectures unknown)")
                     + " by --verifier" + (f", replacing {old_name!r}" if old_name and old_name != named.name_or_path else ""))

    unmatched = sorted(d for d in drop_set if not any(_matches_drop(c, n, {d}) for c, n in read.canonical.items()))
    if unmatched:
        raise UsageError(f"--drop {', '.join(unmatched)} matches no tensor of this checkpoint")
    problems += _compat_problems(dst, spec, len(layer_indices(read.tensors)))

    plan: list[PlanRow] = []
    out: list[OutputTensor] = []
    dest_names: dict[str, str] = {}
    for canonical, src_name in sorted(read.canonical.items()):
        info = read.tensors[canonical]
        if canonical in removed:
            plan.append(PlanRow(source=src_name, destination=None, shape=list(info.shape), dtype=info.dtype,
                                action="drop", reason=removed[canonical]))
            continue
        if canonical in computed:
            continue  # emitted below with the other computed tensors
        if BUFFER_NAME.match(canonical):
            plan.append(PlanRow(source=src_name, destination=None, shape=list(info.shape), dtype=info.dtype,
                                action="drop", reason="a RoPE buffer, not a parameter: every engine recomputes it "
                                "from the rope config (llama.cpp's converter and vLLM's loader skip it too)"))
            continue
        cap = dst.holding_policy(canonical)
        if cap is not None:
            if cap.policy == "derive":
                plan.append(PlanRow(source=src_name, destination=None, shape=list(info.shape), dtype=info.dtype,
                                    action="drop", reason=f"{cap.reason}"))
                continue
            if cap.policy == "drop" and _matches_drop(canonical, src_name, drop_set):
                plan.append(PlanRow(source=src_name, destination=None, shape=list(info.shape), dtype=info.dtype,
                                    action="drop", reason=f"--drop {_short_name(canonical)}: {cap.reason}"))
                continue
            hint = f"; pass --drop {_short_name(canonical)} to drop it (lossy)" if cap.policy == "drop" else ""
            problems.append((src_name, f"{cap.reason}{hint}"))
            continue
        if _matches_drop(canonical, src_name, drop_set):
            plan.append(PlanRow(source=src_name, destination=None, shape=list(info.shape), dtype=info.dtype,
                                action="drop", reason=f"--drop {_short_name(canonical)}"))
            continue
        dest = rename(dst.renames, canonical, to_canonical=False)
        if dest is None:
            problems.append((f"{src_name}: no {dst.name} rule names canonical tensor {canonical}", ""))
            continue
        if dest in dest_names:
            problems.append((f"{src_name} and {dest_names[dest]} would both be written as {dest}", ""))
            continue
        dest_names[dest] = src_name
        plan.append(PlanRow(source=src_name, destination=dest, shape=list(info.shape), dtype=info.dtype, action="copy"))
        out.append(OutputTensor(dest, info.dtype, info.shape, info.nbytes, _copy_writer(loaded, src_name)))

    for canonical, new in sorted(computed.items()):
        dest = rename(dst.renames, canonical, to_canonical=False)
        if dst.holding_policy(canonical) is not None or dest is None:
            problems.append((f"the {dst.name} layout cannot store {canonical}, which {transform and transform.name} "
                             "computes", ""))
            continue
        if dest in dest_names:
            problems.append((f"computed {canonical} and {dest_names[dest]} would both be written as {dest}", ""))
            continue
        dest_names[dest] = canonical
        plan.append(PlanRow(source=read.canonical.get(canonical), destination=dest, shape=list(new.shape),
                            dtype=new.dtype, action="computed", reason=new.reason))
        out.append(OutputTensor(dest, new.dtype, new.shape, len(new.data), _bytes_writer(new.data)))

    present = (set(read.tensors) | set(computed)) - set(removed) - {
        r for r in read.canonical if _matches_drop(r, read.canonical[r], drop_set)}
    for needed in dst.requires_for(spec):
        if needed in present:
            continue
        derived = _derive(needed, loaded, spec)
        if derived is None:
            problems.append((f"the {dst.name} layout requires {needed}, which the source lacks and which cannot be "
                             "derived exactly", ""))
            continue
        data, dtype, shape, how = derived
        dest = rename(dst.renames, needed, to_canonical=False) or needed
        plan.append(PlanRow(source=None, destination=dest, shape=list(shape), dtype=dtype, action="derive", reason=how))
        out.append(OutputTensor(dest, dtype, shape, len(data), _bytes_writer(data)))
        notes.append(f"derived {dest}: {how}")

    if problems:
        message = refusal(problems)
        hint = "" if "eagleconv downgrade" in message else _downgrade_hint(dst, spec, transform)
        raise ConversionError(message + hint, loaded.store.path)

    provenance: JSONObject = {"layout": dst.name, "version": __version__, "converted_from": loaded.layout.name,
                  "aux_layer_convention": dst.aux_convention_for(spec.architecture) if spec.aux.ids else None}
    if transform is not None:  # its flags are eagleconv's, in the engines' meaning (validation's EC023 reads this)
        provenance["transform"] = transform.name
    config = write_config(dst, spec, provenance)
    if dst.name == loaded.layout.name:
        _keep_unread_top_level(loaded, config)
    report = ConvertReport(ok=True, source=str(loaded.store.path), destination="", source_format=loaded.layout.name,
                           destination_format=dst.name, dry_run=True, plan=plan,
                           config_changes=_config_changes(loaded, dst, spec, config), notes=notes,
                           exact=transform.exact if transform is not None else True,
                           divergence=list(transform.divergence) if transform is not None else [],
                           findings=output_findings(dst, spec))
    return report, out, config, spec


def refuse_without_verifier(loaded: LoadedDrafter, to: str, verifier: str | Verifier | None) -> None:
    """A speculators output that names no verifier cannot be loaded by speculators (EC043): stop before writing."""
    spec = loaded.spec
    if not get_layout(to).carries_verifier or verifier is not None or (spec and spec.verifier and spec.verifier.name_or_path):
        return
    raise ConversionError(f"the {to} output would name no verifier, and speculators' loader needs one (EC043): pass "
                          "--verifier ORG/NAME (the target model), or --allow-no-verifier to write it anyway; "
                          "nothing was written", loaded.store.path, code="EC043")


def output_findings(dst: type[Layout], spec: DrafterSpec) -> list[Finding]:
    """What the destination's own loader will refuse in the output (the source had no say in it)."""
    out: list[Finding] = []
    if dst.carries_verifier and not (spec.verifier and spec.verifier.name_or_path):
        out.append(Finding(code="EC043", severity="warning", message=(
            f"the {dst.name} output names no verifier (speculators_config.verifier.name_or_path is null): "
            "speculators' SpeculatorModel.from_pretrained calls AutoConfig.from_pretrained on it and fails; "
            "pass --verifier NAME_OR_PATH")))
    return out


def _derive(needed: str, loaded: LoadedDrafter, spec: DrafterSpec) -> tuple[bytes, str, tuple[int, ...], str] | None:
    """An exact derivation of ``needed`` from what the source has: (bytes, dtype, shape, how), or None."""
    t, store = loaded.read.tensors, loaded.store
    if needed == "d2t" and not spec.compressed_vocab:
        return (identity_d2t(spec.draft_vocab_size), "I64", (spec.draft_vocab_size,),
                "identity mapping (draft vocab = target vocab)")
    if needed == "t2d":
        shape = (spec.vocab_size,)
        if "d2t" in t:
            info = t["d2t"]
            check = check_d2t(store.read_bytes(loaded.read.canonical["d2t"]), info.dtype, info.shape,
                              spec.vocab_size, spec.draft_vocab_size)
            if check.target_ids is not None:
                return (t2d_from_target_ids(check.target_ids, spec.vocab_size), "BOOL", shape,
                        "from d2t (t2d[i + d2t[i]] = true)")
            return None
        if not spec.compressed_vocab:
            return b"\x01" * spec.vocab_size, "BOOL", shape, "all true (draft vocab = target vocab)"
    return None


def _leaf_paths(node: object, prefix: str = "") -> set[str]:
    if isinstance(node, dict):
        return set().union(*(_leaf_paths(v, f"{prefix}{k}.") for k, v in node.items())) if node else set()
    return {prefix[:-1]}


def _config_changes(loaded: LoadedDrafter, dst: type[Layout], spec: DrafterSpec, config: dict) -> list[str]:
    """Source config fields that do not reach the destination, and rewritten values worth a word.

    A field the spec read, or carried, or that the output states with the same value (at the same path,
    or at the same place relative to the decoder: speculators nests it in transformer_layer_config) is
    kept.  The source layout's own structure (its ``meta_keys``: speculators_model_type,
    _torchspec_version...) is not listed; the verifier name is, when the destination cannot carry it.
    """
    source = loaded.store.config or {}
    src = loaded.layout
    src_prefix, dst_prefix = src.decoder_prefix(), dst.decoder_prefix()
    kept = loaded.read.consumed | {src_prefix + k for k in spec.extra}
    changes = []
    for path in sorted(_leaf_paths(source)):
        if any(path == k or path.startswith(k + ".") for k in kept | src.meta_keys):
            continue
        value = get_path(source, path)
        rel = path[len(src_prefix):] if src_prefix and path.startswith(src_prefix) else path
        written = [w for w in (get_path(config, p) for p in dict.fromkeys((path, dst_prefix + rel, rel)))
                   if w is not MISSING]
        if value in written:
            continue
        if written:
            changes.append(f"config field {path} = {value!r} is written as {written[0]!r} by the {dst.name} layout")
        else:
            changes.append(f"dropped config field {path} = {value!r} (the {dst.name} layout has no place for it)")
    if spec.verifier and spec.verifier.name_or_path and not dst.carries_verifier:
        changes.append(f"dropped verifier {spec.verifier.name_or_path!r} (only the speculators layout records it)")
    if spec.aux.ids and spec.aux.convention != dst.aux_convention_for(spec.architecture):
        changes.append(f"aux layer ids renumbered {list(spec.aux.ids)} ({spec.aux.convention}) -> "
                       f"{list(spec.aux.ids_as(dst.aux_convention_for(spec.architecture)) or [])} "
                       f"({dst.aux_convention_for(spec.architecture)})")
    held = dst.holding(spec.architecture)
    labels = config.get("architectures"), config.get("model_type")
    relabelled = labels != (source.get("architectures"), source.get("model_type"))
    if spec.model_type in dst.model_types:
        changes.append(f"model_type {spec.model_type} -> {dst.model_types[spec.model_type]} "
                       f"({held.why if held is not None and held.why else f'so the {dst.name} consumer recognises the drafter'})")
    elif held is not None and held.why and relabelled:
        changes.append(f"architectures {labels[0]}: {held.why}")
    if spec.aux.ids is None:
        changes.append("no aux layer ids to write: engines will guess the target layers (pass --aux-layer-ids)")
    return changes


def _keep_unread_top_level(loaded: LoadedDrafter, config: dict) -> None:
    """Into its own layout, the source's top-level keys that no field reads (speculators' ``embed_requires_grad``,
    outside its ``transformer_layer_config``) keep their place: the destination has the same place for them.
    (Unread keys at the decoder level are carried for every layout, as ``DrafterSpec.extra``.)"""
    source = loaded.store.config or {}
    root = loaded.layout.decoder_prefix()[:-1]
    read = {path.partition(".")[0] for path in loaded.read.consumed}
    for key, value in source.items():
        if key not in config and key != root and key not in read and key not in loaded.layout.meta_keys:
            config[key] = value
