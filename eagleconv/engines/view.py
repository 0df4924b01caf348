"""A checkpoint's drafter as one engine release builds it: the one place the engine's loading behaviour is resolved.

``view_drafter`` reads a loaded checkpoint the way a profile says the engine does: the config as its model class
sees it (``engine_view``), which checks stop it loading, the flags and the target layers it runs with, and the
tensors its loader fills in where the checkpoint has none.  ``validate --forward --engine`` reports and runs that
view; ``simulate --engine`` takes it further through the profile's ``serve`` function (``serving_view``), which
refuses what the engine would not serve, or what it would draft unpredictably, and adds what that engine
borrows or defaults.  The tensors themselves are made by the forward (``forward.engine``): this module is data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import architectures
from ..spec.drafter import DrafterSpec, EagleFlags
from ..spec.report import EngineForward, Finding
from .base import DrafterView, EngineProfile, EngineView, Fill, FillKind, Subject, engine_view, lookup
from .checks import check_architecture, check_aux_count, check_keys

if TYPE_CHECKING:
    from ..readers.loading import LoadedDrafter
    from ..config.target import TargetInfo


def subject_of(loaded: LoadedDrafter, target: TargetInfo | None = None) -> Subject:
    """A loaded checkpoint as the engine checks take it (all its tensors present)."""
    return Subject(dict(loaded.store.config or {}), layout=loaded.layout, read=loaded.read,
                   names=set(loaded.store.tensors), has_tensors=True, path=str(loaded.store.path), target=target)


def missing_norms(spec: DrafterSpec, names: set[str]) -> dict[str, Fill]:
    """The norms ``spec``'s flags add that the checkpoint lacks and the architecture reads: the engine leaves
    them at their initial weight, the identity scale."""
    K, Ht = spec.aux.count, spec.target_hidden_size
    want: dict[str, int] = {}
    if spec.flags.fc_norm:
        want |= {f"fc_norm.{i}.weight": Ht for i in range(K)}
    if spec.flags.norm_before_fc and architectures.get(spec.architecture).reads_norm_before_fc:
        want["input_norm.weight"] = K * Ht
    return {n: Fill("unit_norm", shape=(w,)) for n, w in want.items() if n not in names}


def _captured(view: EngineView, intended_ids: tuple[int, ...], target_layers: int | None,
              report: EngineForward) -> tuple[tuple[int, ...], bool]:
    """The target layers the engine captures (its numbering) and whether it guesses them (noted in ``report``)."""
    rules = view.profile.capture
    if rules.from_runtime:
        return intended_ids, False  # the user passes them at launch; assumed right (validate reports it as EC010)
    for path in (*rules.paths, *(p for p, *_ in rules.some_runners)):
        value = lookup(view.config, path)
        if isinstance(value, list) and value:
            return tuple(rules.shift(tuple(value))), False
    if target_layers is not None and rules.default_ids is not None:
        ids = tuple(rules.default_ids(target_layers))
        report.differs.append(f"no aux ids in the config: the engine guesses {list(ids)}")
        return ids, True
    report.differs.append(f"no aux ids in the config: the engine guesses {rules.default}; without "
                          "--target the layer count is unknown, so the intended layers are used")
    return intended_ids, True


def view_drafter(profile: EngineProfile, loaded: LoadedDrafter, intended_ids: tuple[int, ...],
                 target_layers: int | None, *, target: TargetInfo | None = None) -> DrafterView:
    """How ``profile`` will run this checkpoint: its flags, its captured layers, the norms it fills, whether it loads.

    ``intended_ids``: the layers the checkpoint means (hidden_state_index); ``target_layers``: the target's depth
    when known (the engine's guess needs it); ``target``: the target's config, for the checks that read it.
    """
    intended = loaded.require_spec()
    subject = subject_of(loaded, target)
    reading = engine_view(profile, subject)
    report = EngineForward(engine=profile.label, runs=False, aux_layer_ids=None)
    fatal = [f.message for check in (check_architecture, check_aux_count, *profile.load_checks)
             for f in check(subject, reading) if f.severity == "error"]
    if fatal:
        report.reason = fatal[0]
        return DrafterView(profile=profile, subject=subject, reading=reading, report=report, spec=None,
                           layers=intended_ids, target_layers=target_layers)
    # only names the loader raises on stop it; a missing or skipped tensor leaves a value in place (reported below)
    rejected = [f for f in check_keys(subject, reading) if f.severity == "error" and f.effect == "load_fails"]
    flags = intended.flags.model_dump()
    for flag in flags:
        if flag in reading.flags:
            flags[flag] = reading.flags[flag][0]
    report.flags = flags
    for flag, value in flags.items():
        if value != getattr(intended.flags, flag):
            report.differs.append(f"{flag} = {str(value).lower()} ({reading.flags[flag][1]}), "
                                  f"the checkpoint means {str(getattr(intended.flags, flag)).lower()}")
    ids, guessed = _captured(reading, intended_ids, target_layers, report)
    if tuple(sorted(ids)) != tuple(sorted(intended_ids)):
        report.differs.append(f"captures target layers {sorted(ids)}, the checkpoint means {sorted(intended_ids)}")
    report.aux_layer_ids = sorted(ids)
    spec = intended.model_copy(update={"flags": EagleFlags(**flags)})
    if rejected:  # the loader raises on these names; the steps show what it computes were they skipped
        report.reason = rejected[0].message
        report.differs.append(f"the loader rejects {len(rejected)} tensor(s) and the engine would not start; the "
                              "steps show what it would compute if they were skipped")
    report.runs = not rejected
    fills = missing_norms(spec, set(loaded.read.canonical))
    if fills:
        report.differs.append(f"initialises {', '.join(sorted(fills))} to ones (absent from the checkpoint)")
    return DrafterView(profile=profile, subject=subject, reading=reading, report=report, spec=spec,
                       layers=tuple(sorted(ids)), target_layers=target_layers, guessed=guessed, fills=fills)


def engine_findings(profile: EngineProfile, subject: Subject, reading: EngineView | None = None, *,
                    gguf: bool = False) -> list[Finding]:
    """validate's findings for one engine: each of the profile's checks on the config as the engine reads it (on a
    GGUF drafter, its ``gguf_checks``: what the engine's loader needs from that file)."""
    reading = reading if reading is not None else engine_view(profile, subject)
    return [f for check in (profile.gguf_checks if gguf else profile.checks) for f in check(subject, reading)]


def load_failures(view: DrafterView) -> list[Finding]:
    """Every finding of the profile's checks that says loading fails (what stops the engine serving it)."""
    return [f for f in engine_findings(view.profile, view.subject, view.reading)
            if f.severity == "error" and f.effect == "load_fails"]


def serving_view(profile: EngineProfile, loaded: LoadedDrafter, intended_ids: tuple[int, ...], target_layers: int,
                 *, target: TargetInfo | None = None) -> DrafterView:
    """The drafter as ``profile``'s engine serves it (simulate): ``view_drafter``, then the engine's own ``serve``
    rules (refusals, borrowed and defaulted tensors); a profile without ``serve`` is not modelled that far."""
    if profile.serve is None:
        raise ValueError(f"{profile.label} does not model how its engine serves a drafter")
    return profile.serve(view_drafter(profile, loaded, intended_ids, target_layers, target=target))


__all__ = ["DrafterView", "Fill", "FillKind", "engine_findings", "load_failures", "missing_norms", "serving_view",
           "subject_of", "view_drafter"]
