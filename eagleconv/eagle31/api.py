"""``upgrade`` (EAGLE-3 -> 3.1) and ``downgrade`` (3.1 -> 3): the orchestration, a transform then the convert writer.

The math is :mod:`eagleconv.eagle31.transforms` (functions of tensors and the plans built from them); this module wires it
to the source,
the calibration states, the divergence measurement and the staged, verified
writer of :func:`eagleconv.conversion.convert`, and builds the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from ..support._extras import need
from ..support._process import start_worker_pools
from ..readers.calibration import TOKENS_KEY, Calibration, load_calibration
from ..conversion import convert
from ..conversion.transform import Transform
from ..errors import ConversionError, UsageError
from ..formats import get_layout
from ..spec.report import FlagsView, RefitRow, StepDivergence, TransformChange, TransformReport
from .transforms import Plan, Style, check_style, plan_downgrade, plan_upgrade

if TYPE_CHECKING:
    import torch

    from ..spec.drafter import DrafterSpec, EagleFlags
    from ..forward import Target
    from ..forward.model import DraftInputs
    from ..forward.run import StepProgress
    from ..readers.loading import LoadedDrafter

MEASURE_STEPS = 4
# Fewer calibration tokens than this and upgrade warns: on the SmolLM2 pair (benchmarks/upgrade_calibration.py,
# benchmarks/RESULTS.md) the default upgrade kept 82-90% of eagle3's AL - 1 from 1-4 prompts (49-215 tokens),
# 95% from 8 (424-451 tokens), 94-97% from 16 and 97% from 64.
MIN_CALIBRATION_TOKENS = 400
MIN_CALIBRATION_PROMPTS = 8
MEASURE_TOKENS = 1024  # calibration rows the divergence is measured on (whole sequences first): bounds its cost


def _flags(spec: DrafterSpec) -> FlagsView:
    return FlagsView(**spec.flags.model_dump())


class _OneTarget:
    """The ``--target`` model, loaded at most once per command: calibration and the divergence measurement share it."""

    def __init__(self, path: str | Path | None):
        self.path = path
        self.model: Target | None = None

    def load(self) -> Target:
        from ..forward import Target

        assert self.path is not None
        if self.model is None:
            self.model = Target(self.path)
        return self.model

    def loaded_or_path(self) -> Target | str | Path | None:
        return self.model if self.model is not None else self.path


def _calibration(loaded: LoadedDrafter, calibration: str | Path | None, target: _OneTarget,
                 prompts: str | Path | None) -> tuple[Calibration | None, str | None]:
    """The calibration states, from the file or captured from the target on the prompts, and how they were got."""
    spec = loaded.require_spec()
    if calibration is not None and prompts is not None:
        raise UsageError("pass either --calibration or --target with --prompts, not both (with --calibration, "
                         "--target only lends the rows the drafter borrows)")
    if calibration is not None:
        states = load_calibration(calibration, spec)
        return states, f"{calibration} ({states.states.shape[0]} tokens)"
    if target.path is not None or prompts is not None:
        if target.path is None or prompts is None:
            raise UsageError("--target and --prompts go together (the target is run on the prompts to capture aux "
                             "states)")
        return _capture(spec, target, prompts)
    return None, None


def _capture(spec: DrafterSpec, target: _OneTarget, prompts: str | Path) -> tuple[Calibration, str]:
    """The target's aux states on the prompts at the drafter's layers, with the tokens: what a calibration file holds."""
    from ..forward import default_aux_ids, read_prompts

    tgt = target.load()
    prompt_list = read_prompts(prompts, tgt.vocab_size)
    ids = sorted(default_aux_ids(spec, tgt.num_layers))
    captured = Calibration.from_runs(prompt_list, [tgt.run(p, ids) for p in prompt_list], ids,
                                     origin=f"target {target.path} on {prompts}")
    K, Ht = spec.aux.count, spec.target_hidden_size
    width = captured.states.shape[-1]
    if width != K * Ht:
        raise UsageError(f"the target's aux states are {width} wide; this drafter needs {K} x {Ht}")
    return captured, f"{target.path} on {prompts} ({captured.states.shape[0]} tokens, layers {ids})"


def _calibration_inputs(calibration: Calibration, vocab_size: int, seed: int,
                        aux_ids: tuple[int, ...]) -> tuple[list[DraftInputs], str]:
    """The calibration states as draft-round inputs, one per sequence, up to MEASURE_TOKENS rows in all.

    A sequence is its T states and the T+1 tokens x_0..x_T the drafter embeds beside them (x_{t+1} with
    state t); without token ids in the file they are seeded random ids, and the description says so.
    """
    import torch

    from ..forward.model import DraftInputs

    g = torch.Generator().manual_seed(seed)
    inputs: list[DraftInputs] = []
    start = used = 0
    for n, length in enumerate(calibration.lengths):
        take = min(length, MEASURE_TOKENS - used)
        if take <= 0:
            break
        if calibration.tokens is not None:
            tokens = calibration.tokens[n][:take + 1]
        else:
            tokens = torch.randint(0, vocab_size, (take + 1,), generator=g)
        aux = calibration.states[start:start + take].float()
        inputs.append(DraftInputs(tokens.unsqueeze(0), aux.unsqueeze(0), "calibration", aux_ids))
        start += length
        used += take
    total = calibration.states.shape[0]
    where = f"{used} of {total}" if used < total else f"all {total}"
    ids = ("their token ids" if calibration.tokens is not None
           else f"seeded random token ids (seed {seed}; the calibration has no {TOKENS_KEY})")
    return inputs, (f"the calibration states ({where} tokens, {len(inputs)} sequence(s)) with {ids}; from "
                    f"{calibration.origin}")


class _Borrowed(TypedDict, total=False):
    """The target's rows a drafter that ships none borrows (``Drafter``'s keyword arguments of those names)."""

    target_embed: torch.Tensor
    target_lm_head: torch.Tensor


class _Measurer:
    """Source and transformed drafter on identical inputs (eagleconv.forward, float32), compared per draft step.

    The inputs are the calibration states when there are any (the states the new weights were fitted to),
    else the target on the prompts, else seeded synthetic inputs; the target, when given, lends its rows.
    """

    def __init__(self, loaded: LoadedDrafter, target: Target | str | Path | None, prompts: str | Path | None,
                 seed: int, calibration: Calibration | None = None, progress: StepProgress | None = None):
        from ..forward.api import default_aux_ids
        from ..forward.model import Drafter
        from ..forward.inputs import InputFactory
        from ..forward.run import _target_and_prompts, run_all
        from ..forward.weights import CheckpointSource

        spec = loaded.require_spec()
        tgt, prompt_list, layers = _target_and_prompts(target, None if calibration is not None else prompts)
        self.loaded, self.seed, self.progress = loaded, seed, progress
        self.borrowed: _Borrowed = {}
        if tgt is not None:
            if spec.embed_tokens == "target":
                self.borrowed["target_embed"] = tgt.embed
            if spec.lm_head == "target":
                self.borrowed["target_lm_head"] = tgt.lm_head
        ids = tuple(sorted(default_aux_ids(spec, layers)))
        if calibration is not None:
            self.inputs, self.description = _calibration_inputs(calibration, spec.vocab_size, seed, ids)
        else:
            factory = InputFactory(spec.vocab_size, spec.target_hidden_size, target=tgt, prompts=prompt_list,
                                   seed=seed)
            self.inputs, self.description = factory.make(ids), factory.description
        source = Drafter(spec, CheckpointSource(loaded), dtype="float32", seed=seed, **self.borrowed)
        self.compute_dtype = source.compute_dtype
        self.reference = run_all(source, self.inputs, MEASURE_STEPS, progress, "divergence: the source drafter")
        self.notes = source.borrowed()  # rows the drafter borrows that no --target supplied: seeded synthetic

    def divergence(self, spec: DrafterSpec, tensors: dict[str, torch.Tensor], what: str) -> list[StepDivergence]:
        from ..forward.model import Drafter
        from ..forward.run import OverlaySource, compare, run_all
        from ..forward.weights import CheckpointSource

        changed = Drafter(spec, OverlaySource(CheckpointSource(self.loaded), tensors), dtype="float32", seed=self.seed,
                          **self.borrowed)
        steps, _identical = compare(self.reference, run_all(changed, self.inputs, MEASURE_STEPS, self.progress, what))
        return list(steps)


def _source_feedback(loaded: LoadedDrafter, target: _OneTarget, calibration: Calibration,
                     seed: int) -> tuple[torch.Tensor | None, str | None]:
    """The source drafter's fed-back (pre-norm) state at every calibration row of its first pass, [N, H], or
    None and why not: what norm_output's refit makes the post-norm state reproduce."""
    import torch

    from ..forward.api import default_aux_ids
    from ..forward.model import Drafter
    from ..forward.weights import CheckpointSource

    spec = loaded.require_spec()
    if spec.lm_head == "target":
        return None, None  # plan_upgrade says why it cannot compensate
    if calibration.tokens is None:
        return None, (f"norm_output not compensated: the calibration has no {TOKENS_KEY}, so the source's pre-norm "
                      "states cannot be computed")
    borrowed: _Borrowed = {}
    if spec.embed_tokens == "target":
        if target.path is None:
            return None, ("norm_output not compensated: embed_tokens is the target's and no --target was given, so "
                          "the source's pre-norm states cannot be computed")
        borrowed["target_embed"] = target.load().embed
    layers = target.load().num_layers if target.path is not None else None
    inputs, _ = _calibration_inputs(calibration, spec.vocab_size, seed, tuple(sorted(default_aux_ids(spec, layers))))
    drafter = Drafter(spec, CheckpointSource(loaded), dtype="float32", seed=seed, **borrowed)
    rows = []
    with torch.no_grad():
        for x in inputs:
            T = x.tokens.shape[1] - 1
            rows.append(drafter.forward(x.tokens[:, 1:], torch.arange(T), drafter.combine(x.aux)).feedback[0])
    return torch.cat(rows).double(), None


# (the plan, the calibration states it used, how they were got)
Built = tuple[Plan, "Calibration | None", "str | None"]


@dataclass
class _Outcome:
    """What the transform leaves for the report (convert calls it once the destination is checked)."""

    plan: Plan | None = None
    before: DrafterSpec | None = None
    calibration: str | None = None  # where the calibration states came from
    compute_dtype: str | None = None  # the divergence's, when measured
    unit: list[StepDivergence] = field(default_factory=list)  # the divergence with unit norm weights (upgrade)


def _run(source: str | Path | Mapping[str, object], destination: str | Path, *, operation: str, to: str | None,
         build: Callable[[LoadedDrafter], Built], target: _OneTarget, prompts: str | Path | None,
         seed: int, measure_unit: bool, progress: StepProgress | None, sets: tuple[str, ...] = (),
         **convert_kwargs: Any) -> TransformReport:
    """``sets``: the flags the operation turns on, so a destination layout that cannot hold them is refused before
    torch is even imported (the check after ``build`` stays: it sees every flag the plan really set)."""
    state = _Outcome()
    need("torch", operation)  # find_spec only: imports nothing

    def refuse_unsupported(loaded: LoadedDrafter, flags: EagleFlags | None, also: tuple[str, ...] = ()) -> None:
        dst = get_layout(to or loaded.layout.name)
        on = [f for f, info in type(flags).model_fields.items() if getattr(flags, f) != info.default] if flags else []
        unsupported = [f for f in dict.fromkeys([*on, *also]) if f not in dst.flags]
        if unsupported:
            raise ConversionError(f"the {dst.name} layout cannot express {', '.join(unsupported)}; pass --to with a "
                                  "layout that can (e.g. --to vllm)", loaded.store.path)

    def transform(loaded: LoadedDrafter) -> Transform:
        # convert calls this after the destination checks, so a refused DST costs no torch import or measurement.
        spec = loaded.require_spec()
        refuse_unsupported(loaded, None, sets)  # a refusal that needs no numbers comes before any forward pass
        start_worker_pools()  # before the plan and the measurement create them from the main thread
        plan, calibration, label = build(loaded)
        new = plan.transform.spec
        refuse_unsupported(loaded, new.flags)
        state.plan, state.before, state.calibration = plan, spec, label
        if not plan.transform.exact:
            measurer = _Measurer(loaded, target.loaded_or_path(), prompts, seed, calibration=calibration,
                                 progress=progress)
            plan.transform.divergence = measurer.divergence(new, plan.new_tensors, f"divergence: the {operation}d drafter")
            state.compute_dtype = measurer.compute_dtype
            plan.transform.notes.append(f"divergence measured over {MEASURE_STEPS} draft steps on {measurer.description}")
            plan.transform.notes += measurer.notes
            if measure_unit and plan.unit_variant is not None:
                state.unit = measurer.divergence(new, plan.unit_variant,
                                                    "divergence: unit norm weights")
        return plan.transform

    # --to gguf: the target whose tokenizer and layer count the draft GGUF carries (convert's ``target``;
    # ``target`` here is the model aux states are captured from)
    gguf_target = convert_kwargs.pop("gguf_target", None)
    report = convert(source, destination, to, transform=transform, target=gguf_target, **convert_kwargs)
    plan, before = state.plan, state.before
    if plan is None or before is None:
        raise RuntimeError(f"{operation}: convert returned without calling the transform")
    after = plan.transform.spec
    return TransformReport(
        **report.model_dump(),
        operation=operation,
        flags_before=_flags(before), flags_after=_flags(after),
        eagle_version_before=before.eagle_version, eagle_version_after=after.eagle_version,
        changes=[TransformChange(change=what, exact=exact) for what, exact in plan.changes],
        refits=[RefitRow(**vars(r)) for r in plan.refits],
        initialisation=plan.initialisation,
        calibration=state.calibration,
        divergence_unit_weights=state.unit,
        compute_dtype=state.compute_dtype,
        output_dtype=after.dtype,
    )


def few_calibration_tokens(states: Calibration) -> str:
    """The warning for a calibration too small to fit the new weights well (MIN_CALIBRATION_TOKENS)."""
    rows, sequences = states.states.shape[0], len(states.lengths)
    return (f"warning: only {rows} calibration tokens ({sequences} prompt{'s' if sequences != 1 else ''}): upgrade "
            f"wants at least {MIN_CALIBRATION_TOKENS} (about {MIN_CALIBRATION_PROMPTS} prompts of ~50 tokens). On the "
            "SmolLM2 pair it kept 82-90% of the drafter's AL - 1 from 1-4 prompts, 95% from "
            f"{MIN_CALIBRATION_PROMPTS} (benchmarks/RESULTS.md). Capture more with --target DIR --prompts FILE")


def upgrade(source: str | Path | Mapping[str, object], destination: str | Path, *, config: object = None,
            style: str = "fc_norm", fc_norm: bool = True,
            norm_output: bool = True, calibration: str | Path | None = None, target: str | Path | None = None,
            prompts: str | Path | None = None, to: str | None = None, seed: int = 0, refit: bool = True,
            progress: StepProgress | None = None, **convert_kwargs: Any) -> TransformReport:
    """EAGLE-3 -> EAGLE-3.1 at ``destination`` (layout ``to``, default the source's).

    ``source``: a checkpoint directory, or an in-memory state dict with its ``config`` (a dict, a config.json
    path or a transformers ``PretrainedConfig``), as a training loop holds them (see :func:`convert`).

    ``style``: ``fc_norm`` (one RMSNorm per aux state, the paper and vLLM
    #42764) or ``norm_before_fc`` (one over the concatenation, speculators
    #692).  ``fc_norm=False`` adds no normalisation; with ``norm_output`` also
    off the output computes exactly what the input did (tensors byte-identical,
    ``exact`` true).  New norm weights preserve each input's typical scale when
    aux states are given (``calibration``: the file :func:`capture_aux_states`
    ``save_to=`` writes, see :mod:`eagleconv.eagle31.transforms`; or ``target`` +
    ``prompts``), else they are 1.0, and the divergence is measured on those
    states (``target`` with ``calibration`` lends the borrowed rows).  With
    aux states and ``refit`` (the default) the weights the new norms make
    stale are refitted by least squares on them: fc to the normalised inputs,
    and for norm_output norm.weight with lm_head (logits unchanged), so the
    fed-back state keeps the source's scale; ``report.refits`` has the residuals.
    The result is a starting point for EAGLE-3.1 fine-tuning, not a trained 3.1 drafter.
    ``progress(what, done, total)`` is told how the divergence measurement advances (see forward.run.run_all).
    """
    chosen: Style = check_style(style)
    state_style = chosen if fc_norm else None
    one_target = _OneTarget(target)

    def build(loaded: LoadedDrafter) -> Built:
        spec = loaded.require_spec()
        adds_output_norm = norm_output and not spec.flags.norm_output
        wanted = fc_norm or (refit and adds_output_norm)
        states, label = _calibration(loaded, calibration, one_target, prompts) if wanted else (None, None)
        per_state = states.per_state(spec.aux.count) if states is not None and fc_norm else None
        feedback, why_not = None, None
        if states is not None and refit and adds_output_norm:
            feedback, why_not = _source_feedback(loaded, one_target, states, seed)
        plan = plan_upgrade(loaded, style=chosen, fc_norm=fc_norm, norm_output=norm_output, calibration=per_state,
                            refit=refit, feedback=feedback)
        if why_not is not None:
            plan.transform.notes.append(why_not)
        if states is not None and states.states.shape[0] < MIN_CALIBRATION_TOKENS:
            plan.transform.notes.append(few_calibration_tokens(states))
        return plan, states, label

    report = _run(source, destination, operation="upgrade", to=to, build=build, target=one_target, prompts=prompts,
                  seed=seed, measure_unit=True, progress=progress, config=config,
                  sets=tuple(f for f, on in ((chosen, fc_norm), ("norm_output", norm_output)) if on), **convert_kwargs)
    report.style = state_style
    return report


def downgrade(source: str | Path | Mapping[str, object], destination: str | Path, *, config: object = None,
              allow_lossy: bool = False,
              calibration: str | Path | None = None, target: str | Path | None = None, prompts: str | Path | None = None,
              to: str | None = None, seed: int = 0, progress: StepProgress | None = None,
              **convert_kwargs: Any) -> TransformReport:
    """EAGLE-3.1 -> EAGLE-3 at ``destination``, for engines without 3.1 support.

    Exact steps (folding fc_norm weights into fc, dropping a no-op flag) are
    always done.  Removing a normalisation or the post-norm feedback changes
    the model: without ``allow_lossy`` that raises ConversionError (exit 1) and
    nothing is written; with it the report has ``exact`` false and the
    measured ``divergence``.  Captured aux states (``calibration``, or
    ``target`` + ``prompts``) let the removed fc_norm's scale be folded into fc.  ``source``, ``config`` and
    ``progress``: as in upgrade.
    """
    one_target = _OneTarget(target)

    def build(loaded: LoadedDrafter) -> Built:
        spec = loaded.require_spec()
        if not allow_lossy:  # refused for what it would change: before capturing any calibration states
            plan_downgrade(loaded, allow_lossy=False)
        states, label = _calibration(loaded, calibration, one_target, prompts) if spec.flags.fc_norm else (None, None)
        per_state = states.per_state(spec.aux.count) if states is not None else None
        return plan_downgrade(loaded, allow_lossy=allow_lossy, calibration=per_state), states, label

    report = _run(source, destination, operation="downgrade", to=to, build=build, target=one_target, prompts=prompts,
                  seed=seed, measure_unit=False, progress=progress, config=config, **convert_kwargs)
    return report
