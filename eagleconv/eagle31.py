"""``upgrade`` (EAGLE-3 -> 3.1) and ``downgrade`` (3.1 -> 3): a transform, then the convert writer.

The math is :mod:`eagleconv.transforms`; this module wires it to the source,
the calibration states, the divergence measurement and the staged, verified
writer of :func:`eagleconv.conversion.convert`, and builds the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._extras import need
from .conversion import Transform, convert
from .errors import ConversionError, UsageError, start_worker_pools
from .formats import get_layout
from .report import FlagsView, StepDivergence, TransformChange, TransformReport
from .transforms import Plan, Style, check_style, load_calibration, plan_downgrade, plan_upgrade

if TYPE_CHECKING:
    import torch

    from .drafter import DrafterSpec
    from .forward import Target
    from .loading import LoadedDrafter

MEASURE_STEPS = 4


def _flags(spec: DrafterSpec) -> FlagsView:
    return FlagsView(**spec.flags.model_dump())


class _OneTarget:
    """The ``--target`` model, loaded at most once per command: calibration and the divergence measurement share it."""

    def __init__(self, path: str | Path | None):
        self.path = path
        self.model: Target | None = None

    def load(self) -> Target:
        from .forward import Target

        assert self.path is not None
        if self.model is None:
            self.model = Target(self.path)
        return self.model

    def loaded_or_path(self) -> Target | str | Path | None:
        return self.model if self.model is not None else self.path


def _calibration(loaded: LoadedDrafter, calibration: str | Path | None, target: _OneTarget,
                 prompts: str | Path | None) -> tuple[torch.Tensor | None, str | None]:
    spec = loaded.require_spec()
    if calibration is not None and (target.path is not None or prompts is not None):
        raise UsageError("pass either --calibration or --target with --prompts, not both")
    if calibration is not None:
        states = load_calibration(calibration, spec)
        return states, f"{calibration} ({states.shape[0]} tokens)"
    if target.path is not None or prompts is not None:
        if target.path is None or prompts is None:
            raise UsageError("--target and --prompts go together (the target is run on the prompts to capture aux states)")
        return _capture(spec, target, prompts)
    return None, None


def _capture(spec: DrafterSpec, target: _OneTarget, prompts: str | Path) -> tuple[torch.Tensor, str]:
    """Aux states of a transformers target on the prompts, in the drafter's aux order: [N, K, Ht]."""
    import torch

    from .forward import capture_aux_states, default_aux_ids, read_prompts

    tgt = target.load()
    prompt_list = read_prompts(prompts, tgt.vocab_size)
    ids = sorted(default_aux_ids(spec, tgt.num_layers))
    captured = capture_aux_states(tgt, prompt_list, ids)
    states = torch.cat([torch.cat([c[i] for i in ids], -1) for c in captured], 0)
    K, Ht = spec.aux.count, spec.target_hidden_size
    if states.shape[-1] != K * Ht:
        raise UsageError(f"the target's aux states are {states.shape[-1]} wide; this drafter needs {K} x {Ht}")
    return states.double().reshape(-1, K, Ht), f"{target.path} on {prompts} ({states.shape[0]} tokens, layers {ids})"


class _Measurer:
    """Source and transformed drafter on identical inputs (eagleconv.forward, float32), compared per draft step."""

    def __init__(self, loaded: LoadedDrafter, target: Target | str | Path | None, prompts: str | Path | None,
                 seed: int):
        from .forward.api import default_aux_ids
        from .forward.model import Drafter
        from .forward.run import InputFactory, _target_and_prompts, run_all
        from .forward.weights import CheckpointSource

        spec = loaded.require_spec()
        tgt, prompt_list, layers = _target_and_prompts(target, prompts)
        self.loaded, self.seed = loaded, seed
        self.borrowed: dict[str, Any] = {}
        if tgt is not None:
            if spec.embed_tokens == "target":
                self.borrowed["target_embed"] = tgt.embed
            if spec.lm_head == "target":
                self.borrowed["target_lm_head"] = tgt.lm_head
        factory = InputFactory(spec.vocab_size, spec.target_hidden_size, target=tgt, prompts=prompt_list, seed=seed)
        self.inputs = factory.make(default_aux_ids(spec, layers))
        self.description = factory.description
        source = Drafter(spec, CheckpointSource(loaded), dtype="float32", seed=seed, **self.borrowed)
        self.compute_dtype = source.compute_dtype
        self.reference = run_all(source, self.inputs, MEASURE_STEPS)

    def divergence(self, spec: DrafterSpec, tensors: dict[str, Any]) -> list[StepDivergence]:
        from .forward.model import Drafter
        from .forward.run import OverlaySource, compare, run_all
        from .forward.weights import CheckpointSource

        changed = Drafter(spec, OverlaySource(CheckpointSource(self.loaded), tensors), dtype="float32", seed=self.seed,
                          **self.borrowed)
        steps, _identical = compare(self.reference, run_all(changed, self.inputs, MEASURE_STEPS))
        return list(steps)


def _run(source: str | Path, destination: str | Path, *, operation: str, to: str | None,
         build: Callable[[LoadedDrafter], Plan], target: _OneTarget, prompts: str | Path | None,
         seed: int, measure_unit: bool, **convert_kwargs: Any) -> TransformReport:
    state: dict[str, Any] = {}
    need("torch", operation)
    start_worker_pools()  # before the plan and the measurement create them from the main thread

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
            measurer = _Measurer(loaded, target.loaded_or_path(), prompts, seed)
            plan.transform.divergence = measurer.divergence(new, plan.new_tensors)
            state["compute_dtype"] = measurer.compute_dtype
            plan.transform.notes.append(f"divergence measured over {MEASURE_STEPS} draft steps on {measurer.description}")
            if measure_unit and plan.unit_variant is not None:
                state["unit"] = measurer.divergence(new, {**plan.new_tensors, **plan.unit_variant})
        return plan.transform

    report = convert(source, destination, to, transform=transform, **convert_kwargs)
    plan: Plan = state["plan"]
    before: DrafterSpec = state["before"]
    after = plan.transform.spec
    return TransformReport(
        **report.model_dump(),
        operation=operation,
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
    one_target = _OneTarget(target)

    def build(loaded: LoadedDrafter) -> Plan:
        states, label = _calibration(loaded, calibration, one_target, prompts) if fc_norm else (None, None)
        calibration_label[0] = label
        return plan_upgrade(loaded, style=chosen, fc_norm=fc_norm, norm_output=norm_output, calibration=states)

    report = _run(source, destination, operation="upgrade", to=to, build=build, target=one_target, prompts=prompts,
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
    one_target = _OneTarget(target)

    def build(loaded: LoadedDrafter) -> Plan:
        states, label = (None, None)
        if loaded.require_spec().flags.fc_norm:
            states, label = _calibration(loaded, calibration, one_target, prompts)
        calibration_label[0] = label
        return plan_downgrade(loaded, allow_lossy=allow_lossy, calibration=states)

    report = _run(source, destination, operation="downgrade", to=to, build=build, target=one_target, prompts=prompts,
                  seed=seed, measure_unit=False, **convert_kwargs)
    report.calibration = calibration_label[0]
    return report
