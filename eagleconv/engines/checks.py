"""Checks shared by every engine profile: each compares what one engine will do with what the checkpoint states.

A check is ``check(subject, view) -> list[Finding]``, decorated with the codes
it can emit (the findings reference lists, per code, the engines whose
profiles run a check emitting it).  Checks read profile *data*; nothing here
branches on an engine's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import architectures
from ..spec.canonical import FC_NORM_NAME, expected_tensors
from ..spec.drafter import AuxLayers
from ..formats.base import architectures_of
from ..spec.report import Effect, Finding, Runner
from .base import CaptureRules, EngineView, Subject, lookup

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject

Check = Callable[[Subject, EngineView], list[Finding]]


def emits(*codes: str) -> Callable[[Check], Check]:
    """Record which finding codes a check can produce (read by the findings reference)."""
    def mark(fn: Check) -> Check:
        fn.codes = codes  # type: ignore[attr-defined]
        return fn
    return mark


def finding(view: EngineView, code: str, severity: str, message: str, tensor: str | None = None, *,
            effect: Effect, runner: Runner | None = None) -> Finding:
    """An engine's finding; ``effect`` says what the engine does (parity and the forward read it, never the text)."""
    return Finding(code=code, severity=severity,  # type: ignore[arg-type,unused-ignore]
                   message=message, tensor=tensor, engine=view.profile.label, effect=effect, runner=runner)


def family_of(subject: Subject) -> str | None:
    """The checkpoint's architecture family, from the spec or (config only) from the config."""
    if subject.spec is not None:
        return subject.spec.architecture
    c = subject.config or {}
    layer = c.get("transformer_layer_config")
    decoder: JSONObject = layer if isinstance(layer, dict) else c
    arch = architectures.detect(decoder.get("model_type"), decoder, fallback=False)
    return arch.name if arch is not None else None


def checkpoint_aux_count(subject: Subject) -> tuple[int | None, str]:
    """K the checkpoint was trained with, and the evidence."""
    spec = subject.spec
    if spec is not None:
        info = subject.read.tensors.get("fc.weight") if subject.read else None
        if info is not None:
            return spec.aux.count, f"fc.weight is {list(info.shape)} = [hidden, {spec.aux.count} x {spec.target_hidden_size}]"
        return spec.aux.count, "the config"
    ids = subject.stated("aux_layer_ids")
    if isinstance(ids, list) and ids:
        return len(ids), f"the config states {len(ids)} aux layer ids"
    n = subject.stated("num_aux_hidden_states")
    return (n, "num_aux_hidden_states") if isinstance(n, int) else (None, "")


def intended_ids(subject: Subject) -> tuple[tuple[int, ...] | None, str]:
    """The aux ids the checkpoint means, in vLLM's hidden-state-index numbering."""
    spec = subject.spec
    if spec is not None and spec.aux.ids is not None:
        return spec.aux.ids_as("hidden_state_index"), f"{list(spec.aux.ids)} in {spec.aux.convention} numbering"
    ids = subject.stated("aux_layer_ids")
    if isinstance(ids, list) and ids and subject.layout is not None \
            and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):  # else EC005 says so
        convention = subject.layout.aux_convention_for(family_of(subject) or "llama")
        shift = 1 if convention == "layer_output" else 0
        return tuple(i + shift for i in ids), f"{ids} in {convention} numbering"
    return None, ""


# -- architecture ----------------------------------------------------------------

@emits("EC040")
def check_architecture(subject: Subject, view: EngineView) -> list[Finding]:
    """Registry lookup, the class's family against the checkpoint's, and MLA detection."""
    p = view.profile
    out = [finding(view, "EC040", "error", problem, effect="load_fails") for problem in view.problems]
    if view.problems:
        return out
    archs = architectures_of(view.config)  # non-strings are EC005, reported by the layout read
    if not p.classes:
        return out
    if view.cls is None:
        if not archs:
            return out + [finding(view, "EC040", "error", f"config has no architectures; {p.label} cannot pick a drafter "
                                  "class", effect="load_fails")]
        for name in archs:
            if name in p.rejected_architectures:
                return out + [finding(view, "EC040", "error", f"architecture {name}: {p.rejected_architectures[name]}",
                                      effect="load_fails")]
        rewritten = f" (rewritten to {view.architecture})" if view.architecture not in archs else ""
        severity = "error" if p.registry_complete else "warning"
        known = "is not registered" if p.registry_complete else "is not among the architectures eagleconv knows it registers"
        return out + [finding(view, "EC040", severity, f"architecture {', '.join(archs)}{rewritten} {known} in {p.label} "
                              f"(known: {', '.join(sorted(p.classes))})", effect="load_fails")]
    family = family_of(subject)
    if view.cls.family is not None and family is not None and family != view.cls.family \
            and family not in view.cls.loads_families:
        out.append(finding(view, "EC040", "error", f"{view.architecture} makes {p.label} build {view.cls.name}, a "
                           f"{view.cls.family} drafter, but this checkpoint is a {family} drafter; its "
                           f"{'MLA ' if architectures.get(family).mla else ''}tensors do not fit", effect="load_fails"))
    return out


# -- aux hidden states -------------------------------------------------------------

@emits("EC011")
def check_aux_count(subject: Subject, view: EngineView) -> list[Finding]:
    """K the engine builds fc (and fc_norm) for, against the K the checkpoint was trained with."""
    k, evidence = checkpoint_aux_count(subject)
    if view.cls is None or k is None:
        return []
    if view.aux_count is None:
        return [finding(view, "EC011", "info", f"{view.profile.label} takes the number of aux hidden states from "
                        f"{view.aux_count_source}; it must be {k} for this checkpoint ({evidence})", effect="none")]
    if view.aux_count == k:
        return []
    fix = "set num_aux_hidden_states" + (" (inside transformer_layer_config)" if view.speculators else "") + \
          f" = {k} or eagle_config.eagle_aux_hidden_state_layer_ids"
    consequence = "loading fails on fc's shape assertion" if subject.has_tensors else "loading fc will fail its shape assertion"
    return [finding(view, "EC011", "error", f"{view.profile.label} builds fc for K = {view.aux_count} aux hidden states "
                    f"({view.aux_count_source}) but the checkpoint has K = {k} ({evidence}): {consequence}; {fix}",
                    "fc.weight" if subject.has_tensors else None, effect="load_fails")]


def _collapsed(view: EngineView, why: str, captured: list[int], fc_count: int, fix: str) -> Finding:
    """EC011 for ids that name a layer twice (the engine's guess, or the config's): fewer states reach fc."""
    return finding(view, "EC011", "error", f"{why}, so {len(captured)} hidden states ({captured}) reach fc built for "
                   f"{fc_count}: the first request fails with a shape error (vLLM 0.32.0: RuntimeError: shape "
                   f"'[-1, K*H]' is invalid). {fix}", effect="load_fails")


# Every key some engine reads the trained aux layer ids from: one an engine does not read is named, not ignored.
AUX_ID_PATHS = ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")


def _ids_elsewhere(config: dict, rules: CaptureRules) -> tuple[str, list] | None:
    """(path, ids) of aux layer ids stated under a key that ``rules`` does not read, if any."""
    read = {*rules.paths, *(path for path, _, _ in rules.some_runners)}
    for path in AUX_ID_PATHS:
        value = lookup(config, path)
        if path not in read and isinstance(value, list) and value:
            return path, value
    return None


@emits("EC010", "EC011", "EC012", "EC013")
def check_capture(subject: Subject, view: EngineView) -> list[Finding]:
    """Which target layers the engine captures: guessed, renumbered, or out of range."""
    rules, label = view.profile.capture, view.profile.label
    intended, described = intended_ids(subject)
    target = subject.target
    out: list[Finding] = []
    if rules.from_runtime:
        if intended is not None:
            return [finding(view, "EC010", "info", f"{label} takes the captured layers from {rules.from_runtime}, "
                            f"not the config: pass {list(intended)} (the checkpoint's {described})", effect="none")]
        return [finding(view, "EC010", "warning", f"{label} takes the captured layers from {rules.from_runtime} and "
                        "the config does not say which layers the drafter was trained on", effect="runs_differently")]
    ids, source, partial, runner = None, "", "", None
    for path in rules.paths:
        value = lookup(view.config, path)
        if isinstance(value, list) and value:
            ids, source = tuple(value), path
            break
    if ids is None:
        for path, note, ignored_by in rules.some_runners:
            value = lookup(view.config, path)
            if isinstance(value, list) and value:
                ids, source, partial, runner = tuple(value), path, note, ignored_by
                break
    if ids is not None and not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return out  # mistyped ids are EC005 (structural); what the engine would capture from them is undefined
    guess = rules.default
    if target is not None and rules.default_ids is not None:
        guess += f" = {list(rules.default_ids(target.num_hidden_layers))} for this {target.num_hidden_layers}-layer target"
    absent, fix = f"no aux layer ids in the config: {label}", "Stamp the trained ids (eagleconv convert --aux-layer-ids)"
    elsewhere = _ids_elsewhere(view.config, rules) if ids is None else None
    if elsewhere is not None:  # the ids are there, under a key this engine does not read
        where = " or ".join(rules.paths)
        absent = f"the config has aux layer ids at {elsewhere[0]} = {elsewhere[1]}, but {label} reads them only from {where}: it"
        fix = f"Set {rules.paths[0]} to the trained ids as well"
    if ids is None and target is not None and rules.default_ids is not None and view.aux_count is not None \
            and not rules.repeats_kept:
        captured = sorted(set(rules.default_ids(target.num_hidden_layers)))
        if len(captured) != view.aux_count:
            return [_collapsed(view, f"{absent} guesses {guess}, captures each layer once", captured, view.aux_count,
                               fix)]
    if ids is None:
        producer = ""
        if subject.layout is not None and subject.layout.name == "eagle":
            producer = " (SafeAILab's EAGLE hard-codes the same layers, so for its checkpoints the guess is right)"
        return [finding(view, "EC010", "warning", f"{absent} guesses {guess}{producer}; "
                        f"a wrong guess silently collapses acceptance. {fix}", effect="unverified")]
    if partial:
        out.append(finding(view, "EC010", "warning", f"aux layer ids only at {source}: {partial}, and guesses {guess}. "
                           "Also set the top-level eagle_aux_hidden_state_layer_ids", effect="runs_differently", runner=runner))
    engine_ids = rules.shift(ids)
    fc_count = view.aux_count if view.aux_count is not None else len(ids)
    if rules.captures_once and len(set(engine_ids)) < len(engine_ids) and len(set(engine_ids)) != fc_count:
        out.append(_collapsed(view, f"{source} = {list(ids)} names a layer more than once: {label} captures each layer "
                              f"once ({rules.captures_once})", sorted(set(engine_ids)), fc_count,
                              "List each trained layer once (eagleconv convert --aux-layer-ids)"))
    shifted = f" ({rules.shift_rule}: {list(ids)} -> {list(engine_ids)})" if engine_ids != ids else ""
    if intended is not None and sorted(engine_ids) != sorted(intended):
        severity = "warning" if partial else "error"
        out.append(finding(view, "EC012", severity, f"{label} reads {source} = {list(ids)} as hidden-state indices"
                           f"{shifted} and captures {list(engine_ids)}, but the checkpoint means {list(intended)} "
                           f"(its {described}): every aux state is a layer off", effect="runs_differently"))
    if target is not None:
        L = target.num_hidden_layers
        bad = [i for i in engine_ids if not 0 <= i <= L]
        if bad and rules.out_of_range_fails:
            out.append(finding(view, "EC013", "error", f"{label} would capture target layers {list(engine_ids)} but the "
                               f"target has {L} layers (valid ids 0..{L}): {rules.out_of_range_fails}", effect="load_fails"))
        elif bad:
            out.append(finding(view, "EC013", "error", f"{label} would capture target layers {list(engine_ids)} but the "
                               f"target has {L} layers (valid ids 0..{L}); {bad} are never captured", effect="runs_differently"))
    return out


# -- flags -------------------------------------------------------------------------

FLAG_CONSEQUENCES = {
    "fc_norm": "the per-aux fc_norm RMSNorms (EAGLE-3.1)",
    "norm_before_fc": "the input_norm RMSNorm over the concatenated aux states",
    "norm_output": "post-norm feedback to the next draft step (EAGLE-3.1)",
    "norm_before_residual": "layer 0's residual from hidden_norm(g)",
    "use_aux_hidden_state": "the aux hidden states (fc)",
}


def way_out_31(view: EngineView) -> str:
    """The next command for a 3.1 drafter the engine cannot run as trained, said once per engine (issue 35 item 7).

    ``downgrade --allow-lossy`` removes ``fc_norm`` / ``norm_output`` (measuring the cost); an engine that reads
    ``norm_before_fc`` (llama.cpp) can instead serve the EAGLE-3 original upgraded to that one-norm style."""
    upgrade = (" (or, from the EAGLE-3 original, `eagleconv upgrade EAGLE3_SRC DST --style norm_before_fc "
               "--no-norm-output`)" if "norm_before_fc" in view.flags else "")
    return f"; next: `eagleconv downgrade SRC DST --allow-lossy`{upgrade}"


@emits("EC022")
def check_flags(subject: Subject, view: EngineView) -> list[Finding]:
    """Every flag as the engine reads it, against the checkpoint's."""
    out: list[Finding] = []
    missing: list[int] = []  # where the EAGLE-3.1 switches the engine lacks are reported
    spec = subject.spec
    for flag in FLAG_CONSEQUENCES:
        if spec is not None:
            ours = getattr(spec.flags, flag)
        else:
            stated_value = subject.stated(flag)
            ours = bool(stated_value) if stated_value is not None else (flag == "use_aux_hidden_state")
        stated = subject.stated(flag) is not None
        if flag not in view.flags:
            if ours and flag != "use_aux_hidden_state":
                if flag in ("fc_norm", "norm_output"):
                    missing.append(len(out))
                out.append(finding(view, "EC022", "error", f"{flag} is true but {view.profile.label} has no such switch: "
                                   f"it runs without {FLAG_CONSEQUENCES[flag]}", effect="runs_differently"))
            continue
        theirs, source = view.flags[flag]
        if theirs == ours:
            continue
        if stated:
            out.append(finding(view, "EC022", "error", f"the checkpoint sets {flag} = {str(ours).lower()} but "
                               f"{view.profile.label} reads {str(theirs).lower()} ({source}): it runs "
                               f"{'with' if theirs else 'without'} {FLAG_CONSEQUENCES[flag]}", effect="runs_differently"))
        else:
            layout = subject.layout.name if subject.layout else "its layout"
            out.append(finding(view, "EC022", "warning", f"{flag} is absent: {view.profile.label} uses "
                               f"{str(theirs).lower()} ({source}) while {layout} checkpoints default to "
                               f"{str(ours).lower()}; state it explicitly", effect="runs_differently"))
    if missing:  # the way out once, on the last of them
        last = out[missing[-1]]
        out[missing[-1]] = last.model_copy(update={"message": last.message + way_out_31(view)})
    return out


# -- tensor names --------------------------------------------------------------------

def _engine_name(view: EngineView, name: str) -> str:
    for old, new in view.profile.keys.renames if view.profile.keys else ():
        if old in name:
            return name.replace(old, new, 1)
    return name


@emits("EC003", "EC021", "EC050")
def check_keys(subject: Subject, view: EngineView) -> list[Finding]:
    """Replay the engine's weight loader over the stored names: what it rejects, ignores or never fills."""
    rules, spec, cls = view.profile.keys, subject.spec, view.cls
    if rules is None or spec is None or not subject.has_tensors or subject.read is None:
        return []
    if cls is None:  # unregistered architecture (reported by check_architecture): judge the names as its class would
        cls = next((c for c in view.profile.classes.values() if c.family == spec.architecture), None)
        if cls is None:
            return []
    if cls.family is not None and cls.family != spec.architecture and spec.architecture not in cls.loads_families:
        return []  # reported by check_architecture; the names cannot be judged against the wrong class
    label = view.profile.label
    fc_norm = view.flags.get("fc_norm", (False, ""))[0]
    norm_before_fc = view.flags.get("norm_before_fc", (False, ""))[0]
    k = view.aux_count or spec.aux.count
    layers = lookup(view.config, "num_hidden_layers")
    engine_spec = spec.model_copy(update={
        "flags": spec.flags.model_copy(update={"fc_norm": fc_norm, "norm_before_fc": norm_before_fc}),
        "aux": AuxLayers(count=k),
    })
    expected = expected_tensors(engine_spec, num_layers=layers if isinstance(layers, int) else None)
    unknown_policy = cls.unknown_keys or rules.unknown
    canonical_of = {stored: canonical for canonical, stored in subject.read.canonical.items()}
    out: list[Finding] = []
    groups: dict[tuple[str, str, Effect], list[str]] = {}  # (severity, what happens, effect) -> stored names
    prefixed = False  # the loader raises on a doubled prefix before it looks at anything else

    def group(severity: str, what: str, stored: str, effect: Effect) -> None:
        groups.setdefault((severity, what, effect), []).append(stored)

    draft_vocab = lookup(view.config, "draft_vocab_size") or lookup(view.config, "vocab_size")
    target_vocab = subject.target.vocab_size if subject.target is not None else lookup(view.config, "vocab_size")
    for stored in sorted(subject.names):
        if any(s in stored for s in (*rules.dropped, *cls.dropped)):
            continue
        prefix = next((p for p in rules.reject_prefixed if stored.startswith(p)), None)
        if prefix is not None:
            group("error", f"{label} adds its own '{prefix}' prefix to every key but lm_head/d2t/t2d, so these names "
                  f"become {prefix}{prefix}... and loading raises ValueError (strip the prefix: eagleconv convert "
                  "--to vllm)", stored, "load_fails")
            prefixed = True
            continue
        name = _engine_name(view, stored)
        if name == "d2t" and rules.d2t_needs_pruned_vocab and draft_vocab is not None and draft_vocab == target_vocab:
            out.append(finding(view, "EC003", "error", f"{stored}: draft_vocab_size {draft_vocab} equals the target's "
                               f"vocab, so {label} builds no draft_id_to_target_id and loading raises 'There is no "
                               "module or parameter named draft_id_to_target_id'; drop d2t/t2d", stored, effect="load_fails"))
            continue
        if name == "d2t" or name in expected:
            continue
        if m := FC_NORM_NAME.match(name):
            if not fc_norm:
                verb = rules.raises.replace("...", "fc_norm").removesuffix(" at load") if unknown_policy == "raise" \
                    else "silently ignores it: the drafter runs without its trained per-aux norms"
                out.append(finding(view, "EC021", "error", f"{stored} is present but {label} reads fc_norm = false "
                                   f"({view.flags.get('fc_norm', (False, 'not read'))[1]}): it {verb}", stored,
                                   effect="load_fails" if unknown_policy == "raise" else "ignored"))
            elif int(m.group(1)) >= k:
                out.append(finding(view, "EC050", "error", f"{stored}: {label} builds fc_norm.0..{k - 1} for K = {k}; "
                                   f"fc_norm.{m.group(1)} "
                                   f"{'makes loading raise' if unknown_policy == 'raise' else 'is silently ignored'}",
                                   stored, effect="load_fails" if unknown_policy == "raise" else "ignored"))
            continue
        if name == "input_norm.weight" and not norm_before_fc and cls.skips_input_norm:
            out.append(finding(view, "EC021", "error", f"{stored} is present but {label} reads norm_before_fc = "
                               f"false ({view.flags.get('norm_before_fc', (False, 'not read'))[1]}): it silently "
                               "skips the tensor and runs without the trained input norm", stored, effect="ignored"))
            continue
        needed = canonical_of.get(stored)
        needed_here = needed is not None and needed in expected and expected[needed].required
        parent_exists = not rules.bias_needs_module or f"{name.removesuffix('.bias')}.weight" in expected
        if name.endswith(".bias") and rules.unknown_bias == "ignore" and parent_exists:
            group("warning", f"{label} silently ignores unexpected .bias tensors (attention_bias/mlp_bias are off), "
                  "so biases the drafter was trained with are lost", stored, "ignored")
        elif unknown_policy == "raise":
            group("error", f"not parameters of {cls.name}: {label} {rules.raises}", stored, "load_fails")
        elif needed_here:
            group("error", f"{label} does not recognise these names and silently skips them, leaving required "
                  "weights uninitialised", stored, "runs_differently")
        else:
            group("warning", f"{label} silently ignores these tensors", stored, "ignored")
    for (severity, what, effect), stored_names in groups.items():
        shown = ", ".join(stored_names[:4]) + (f" and {len(stored_names) - 4} more" if len(stored_names) > 4 else "")
        out.append(finding(view, "EC003", severity, f"{shown}: {what}", stored_names[0] if len(stored_names) == 1 else None,
                           effect=effect))
    if prefixed:
        return out  # loading fails on the prefix first; missing-tensor consequences would only repeat it
    names = {_engine_name(view, n) for n in subject.names}
    if rules.missing_fails:
        shared = {t for t, when in view.profile.shares_from_target.items() if when == "absent"}
        absent = [n for n, e in expected.items() if e.required and n not in shared and n not in canonical_of.values()]
        if absent:
            out.append(finding(view, "EC003", "error", f"{', '.join(absent)} missing: {label} {rules.missing_fails}",
                               absent[0] if len(absent) == 1 else None, effect="load_fails"))
        return out
    if fc_norm and not any(FC_NORM_NAME.match(n) for n in names):
        out.append(finding(view, "EC021", "error", f"{label} reads fc_norm = true but there are no fc_norm.{{i}}.weight "
                           "tensors: it silently keeps weight 1.0 (unscaled norms the drafter was not trained with)",
                           effect="runs_differently"))
    reads_input_norm = cls.family is None or architectures.get(cls.family).reads_norm_before_fc
    if norm_before_fc and reads_input_norm and "input_norm.weight" not in names:
        if fc_norm:  # measured by the parity tier: the drafts equal the fc_norm drafter's
            out.append(finding(view, "EC021", "info", f"{label} reads norm_before_fc = true but input_norm.weight is "
                               "missing: it keeps weight 1.0, and the per-aux fc_norm that follows undoes a unit-weight "
                               "norm over the concatenation (up to eps), so the drafter runs as the fc_norm drafter",
                               "input_norm.weight", effect="none"))
        else:
            out.append(finding(view, "EC021", "error", f"{label} reads norm_before_fc = true but input_norm.weight is "
                               "missing: it silently keeps weight 1.0", effect="runs_differently"))
    return out


# -- sharing with the target -----------------------------------------------------------

SHARE_REASONS = {
    "absent": "the checkpoint has none",
    "always": "it always uses the target's",
    "same_width": "the drafter's hidden size equals the target's",
}


@emits("EC042", "EC050")
def check_sharing(subject: Subject, view: EngineView) -> list[Finding]:
    """embed_tokens / lm_head the engine takes from the target instead of the checkpoint."""
    spec = subject.spec
    if spec is None or not subject.has_tensors:
        return []
    out = []
    shared_embed = view.profile.shares_from_target.get("embed_tokens.weight")
    if shared_embed in ("absent", "always") and (shared_embed == "always" or spec.embed_tokens == "target") \
            and spec.hidden_size != spec.target_hidden_size:
        out.append(finding(view, "EC050", "error", f"{view.profile.label} uses the target's embed_tokens, which is "
                           f"{spec.target_hidden_size} wide (target_hidden_size), but the drafter's layers are "
                           f"{spec.hidden_size} wide: ship the drafter's own embed_tokens", "embed_tokens.weight",
                           effect="load_fails"))
    for tensor, when in view.profile.shares_from_target.items():
        owner = spec.embed_tokens if tensor == "embed_tokens.weight" else spec.lm_head
        applies = {"absent": owner == "target", "always": True,
                   "same_width": spec.hidden_size == spec.target_hidden_size}[when]
        if not applies:
            continue
        discarded = owner == "drafter"
        out.append(finding(view, "EC042", "warning" if discarded and when == "always" else "info",
                           f"{view.profile.label} uses the target's {tensor.split('.')[0]} ({SHARE_REASONS[when]})"
                           + ("; the checkpoint's own copy is discarded" if discarded else ""), tensor,
                           effect="ignored" if discarded else "none"))
    return out


# -- tensor parallelism -------------------------------------------------------------------

@emits("EC051")
def check_tensor_parallel(subject: Subject, view: EngineView) -> list[Finding]:
    """Divisibility the engine needs to shard heads, KV heads and the MLP across --tp ranks."""
    spec, tp = subject.spec, subject.tp
    if spec is None or tp is None or tp == 1:
        return []
    if tp < 1:  # the CLI's --tp refuses it; a library caller's value is judged like any other
        return [finding(view, "EC051", "error", f"--tp {tp}: tensor parallelism needs at least 1 rank",
                        effect="load_fails")]
    if not view.profile.tensor_parallel:
        return []
    out = []

    def need(ok: bool, what: str) -> None:
        if not ok:
            out.append(finding(view, "EC051", "error", f"--tp {tp}: {what}", effect="load_fails"))

    need(spec.num_attention_heads % tp == 0, f"num_attention_heads {spec.num_attention_heads} is not divisible by {tp}")
    if spec.num_key_value_heads is not None:
        nkv = spec.num_key_value_heads
        need(nkv % tp == 0 if nkv >= tp else tp % nkv == 0,
             f"num_key_value_heads {nkv} can be neither split nor replicated evenly over {tp} ranks")
    need(spec.intermediate_size % tp == 0, f"intermediate_size {spec.intermediate_size} is not divisible by {tp}")
    for name, rows in (("vocab_size", spec.vocab_size), ("draft_vocab_size", spec.draft_vocab_size)):
        if rows % tp:
            out.append(finding(view, "EC051", "info", f"--tp {tp}: {name} {rows} is not divisible by {tp}; the engine "
                               "pads the embedding/lm_head rows per rank (no error)", effect="none"))
    return out


@emits("EC040")
def check_activation(subject: Subject, view: EngineView) -> list[Finding]:
    """The checkpoint's stated MLP activation (hidden_act) against what the engine's MLP computes (issue 32)."""
    rule, act = view.profile.activation, lookup(view.config, "hidden_act")
    if rule is None or not isinstance(act, str) or act in rule.computes:
        return []
    return [finding(view, "EC040", "error", f"hidden_act = {act!r}: {view.profile.label} {rule.why}",
                    effect=rule.otherwise)]


COMMON_CHECKS: tuple[Check, ...] = (check_architecture, check_aux_count, check_capture, check_flags, check_keys,
                                    check_sharing, check_activation)
