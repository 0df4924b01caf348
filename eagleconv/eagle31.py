"""``upgrade`` (EAGLE-3 -> 3.1) and ``downgrade`` (3.1 -> 3): a transform, then the convert writer.

The math is :mod:`eagleconv.transforms`; this module wires it to the source,
the calibration states, the divergence measurement and the staged, verified
writer of :func:`eagleconv.conversion.convert`, and builds the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .conversion import Transform, convert
from .errors import ConversionError, UsageError
from .formats import get_layout
from .report import FlagsView, StepDivergence, TransformChange, TransformReport
from .transforms import Plan, Style, check_style, load_calibration, plan_downgrade, plan_upgrade

if TYPE_CHECKING:
    import torch

    from .drafter import DrafterSpec
    from .loading import LoadedDrafter

MEASURE_STEPS = 4


def _flags(spec: DrafterSpec) -> FlagsView:
    return FlagsView(**spec.flags.model_dump())


def _calibration(loaded: LoadedDrafter, calibration: str | Path | None, target: str | Path | None,
                 prompts: str | Path | None) -> tuple[torch.Tensor | None, str | None]:
    spec = loaded.require_spec()
    if calibration is not None and (target is not None or prompts is not None):
        raise UsageError("pass either --calibration or --target with --prompts, not both")
    if calibration is not None:
        states = load_calibration(calibration, spec)
        return states, f"{calibration} ({states.shape[0]} tokens)"
    if target is not None or prompts is not None:
        if target is None or prompts is None:
            raise UsageError("--target and --prompts go together (the target is run on the prompts to capture aux states)")
        return _capture(spec, target, prompts)
    return None, None


def _capture(spec: DrafterSpec, target: str | Path, prompts: str | Path) -> tuple[torch.Tensor, str]:
    """Aux states of a transformers target on the prompts, in the drafter's aux order: [N, K, Ht]."""
    try:
        from .forward import capture_aux_states  # the reference forward (eagleconv.forward)
    except ImportError:
        raise UsageError("capturing aux states from --target needs eagleconv.forward, which this build lacks; "
                         "pass --calibration FILE instead") from None
    states = capture_aux_states(target, prompts, spec)
    return states, f"{target} on {prompts} ({states.shape[0]} tokens)"


def _measure(loaded: LoadedDrafter, plan: Plan, variant: dict[str, Any] | None, *, target: str | Path | None,
             prompts: str | Path | None, seed: int) -> tuple[list[StepDivergence], str | None, str]:
    """Per-step divergence of the transformed drafter from the source, on identical inputs (eagleconv.forward)."""
    try:
        from .forward import measure_divergence
    except ImportError:
        return [], None, "divergence not measured: this build has no reference forward (eagleconv.forward)"
    tensors = dict(plan.new_tensors)
    if variant is not None:
        tensors.update(variant)
    steps, compute_dtype = measure_divergence(loaded, plan.transform.spec, tensors, set(plan.transform.removed),
                                              target=target, prompts=prompts, steps=MEASURE_STEPS, seed=seed)
    return list(steps), compute_dtype, ""


def _run(source: str | Path, destination: str | Path, *, operation: str, to: str | None,
         build: Callable[[LoadedDrafter], Plan], target: str | Path | None, prompts: str | Path | None,
         seed: int, measure_unit: bool, **convert_kwargs: Any) -> TransformReport:
    state: dict[str, Any] = {}

    def transform(loaded: LoadedDrafter) -> Transform:
        spec = loaded.require_spec()
        plan = build(loaded)
        new = plan.transform.spec
        dst = get_layout(to or loaded.layout.name)
        unsupported = [f for f, info in type(new.flags).model_fields.items()
                       if getattr(new.flags, f) != info.default and f not in dst.flags]
        if unsupported:
            raise ConversionError(f"the {dst.name} layout cannot express {', '.join(unsupported)}; pass --to with a "
                                  "layout that can (e.g. --to vllm)", loaded.store.path)
        state.update(plan=plan, before=spec)
        if not plan.transform.exact:
            steps, compute_dtype, note = _measure(loaded, plan, None, target=target, prompts=prompts, seed=seed)
            plan.transform.divergence = steps
            state["compute_dtype"] = compute_dtype
            if note:
                plan.transform.notes.append(note)
            if measure_unit and plan.unit_variant is not None and steps:
                unit, _, _ = _measure(loaded, plan, plan.unit_variant, target=target, prompts=prompts, seed=seed)
                state["unit"] = unit
        return plan.transform

    report = convert(source, destination, to, transform=transform, **convert_kwargs)
    plan: Plan = state["plan"]
    before: DrafterSpec = state["before"]
    after = plan.transform.spec
    return TransformReport(
        **report.model_dump(),
        operation=operation,  # type: ignore[arg-type]
        flags_before=_flags(before), flags_after=_flags(after),
        eagle_version_before=before.eagle_version, eagle_version_after=after.eagle_version,
        changes=[TransformChange(change=what, exact=exact) for what, exact in plan.changes],
        initialisation=plan.initialisation,
        calibration=state.get("calibration"),
        divergence_unit_weights=state.get("unit", []),
        compute_dtype=state.get("compute_dtype"),
        output_dtype=after.dtype,
    )


def upgrade(source: str | Path, destination: str | Path, *, style: str = "fc_norm", fc_norm: bool = True,
            norm_output: bool = True, calibration: str | Path | None = None, target: str | Path | None = None,
            prompts: str | Path | None = None, to: str | None = None, seed: int = 0,
            **convert_kwargs: Any) -> TransformReport:
    """EAGLE-3 -> EAGLE-3.1 at ``destination`` (layout ``to``, default the source's).

    ``style``: ``fc_norm`` (one RMSNorm per aux state, the paper and vLLM
    #42764) or ``norm_before_fc`` (one over the concatenation, speculators
    #692).  ``fc_norm=False`` adds no normalisation; with ``norm_output`` also
    off the output computes exactly what the input did (tensors byte-identical,
    ``exact`` true).  New norm weights preserve each input's typical scale when
    aux states are given (``calibration``: a safetensors file with
    ``aux_hidden_states``; or ``target`` + ``prompts``), else they are 1.0.
    The result is a starting point for EAGLE-3.1 fine-tuning, not a trained 3.1 drafter.
    """
    chosen: Style = check_style(style)
    state_style = chosen if fc_norm else None
    calibration_label: list[str | None] = [None]

    def build(loaded: LoadedDrafter) -> Plan:
        states, label = _calibration(loaded, calibration, target, prompts) if fc_norm else (None, None)
        calibration_label[0] = label
        return plan_upgrade(loaded, style=chosen, fc_norm=fc_norm, norm_output=norm_output, calibration=states)

    report = _run(source, destination, operation="upgrade", to=to, build=build, target=target, prompts=prompts,
                  seed=seed, measure_unit=True, **convert_kwargs)
    report.style = state_style
    report.calibration = calibration_label[0]
    return report


def downgrade(source: str | Path, destination: str | Path, *, allow_lossy: bool = False,
              calibration: str | Path | None = None, target: str | Path | None = None, prompts: str | Path | None = None,
              to: str | None = None, seed: int = 0, **convert_kwargs: Any) -> TransformReport:
    """EAGLE-3.1 -> EAGLE-3 at ``destination``, for engines without 3.1 support.

    Exact steps (folding fc_norm weights into fc, dropping a no-op flag) are
    always done.  Removing a normalisation or the post-norm feedback changes
    the model: without ``allow_lossy`` that raises ConversionError (exit 1) and
    nothing is written; with it the report has ``exact`` false and the
    measured ``divergence``.  Captured aux states (``calibration``, or
    ``target`` + ``prompts``) let the removed fc_norm's scale be folded into fc.
    """
    calibration_label: list[str | None] = [None]

    def build(loaded: LoadedDrafter) -> Plan:
        states, label = (None, None)
        if loaded.require_spec().flags.fc_norm:
            states, label = _calibration(loaded, calibration, target, prompts)
        calibration_label[0] = label
        return plan_downgrade(loaded, allow_lossy=allow_lossy, calibration=states)

    report = _run(source, destination, operation="downgrade", to=to, build=build, target=target, prompts=prompts,
                  seed=seed, measure_unit=False, **convert_kwargs)
    report.calibration = calibration_label[0]
    return report
