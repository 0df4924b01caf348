"""validate --forward, engine-view forwards and diff: drafters run on identical inputs and compared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .. import architectures
from ..drafter import DrafterSpec, EagleFlags
from ..engines import resolve_engines
from ..engines.base import Subject, engine_view
from ..engines.checks import check_architecture, check_aux_count, check_keys
from ..errors import UsageError
from ..loading import load_drafter
from ..report import DiffReport, DiffStep, EngineForward, Finding, ForwardReport, ForwardStep
from ..target import load_target
from .api import default_aux_ids, load
from .inputs import InputFactory, Target, read_prompts
from .model import DraftInputs, DraftResult, Drafter
from .weights import CheckpointSource, DictSource, TensorSource, stored_name


def _rows(r: DraftResult, a: int, b: int) -> DraftResult:
    """Sequences a..b of a batched draft."""
    return DraftResult([t[a:b] for t in r.tokens], [x[a:b] for x in r.logits], [f[a:b] for f in r.feedback],
                       r.first_pass_logits[a:b])


# progress(what, done, total): called before the first unit of work ``what`` and after each; the CLI draws it
# (eagleconv.cli.app._progress), the library prints nothing.
StepProgress = Callable[[str, int, int], None]


def run_all(drafter: Drafter, inputs: list[DraftInputs], steps: int, progress: StepProgress | None = None,
            what: str = "forward") -> list[DraftResult]:
    """``steps`` draft steps of ``drafter`` on each of ``inputs``; ``progress``, if given, counts the draft steps."""
    if progress is None:
        return [drafter.draft(x, steps) for x in inputs]
    tell, total = progress, len(inputs) * steps
    tell(what, 0, total)

    def counter(before: int) -> Callable[[int], None]:
        return lambda k: tell(what, before + k, total)

    return [drafter.draft(x, steps, on_step=counter(n * steps)) for n, x in enumerate(inputs)]


TINY = 1e-6  # floor of |a| in max_rel_err (StepDivergence: |a - b| / max(|a|, tiny))


def compare(a: list[DraftResult], b: list[DraftResult]) -> tuple[list[DiffStep], bool]:
    """Per step: top-1 agreement, max abs / rel logit error; and whether everything is bit-identical.

    Errors are taken in float64 over the entries finite in both (the rest masked to 0, which never raises a
    maximum of absolute values): whole-tensor passes, no boolean gathers of a [B, T, V] logit tensor.
    """
    steps: list[DiffStep] = []
    identical = True
    for k in range(len(a[0].logits)):
        agree = total = 0
        max_abs, max_rel = 0.0, 0.0
        for ra, rb in zip(a, b):
            la = ra.first_pass_logits if k == 0 else ra.logits[k]
            lb = rb.first_pass_logits if k == 0 else rb.logits[k]
            ia, ib = la.argmax(-1), lb.argmax(-1)  # widening to float64 is exact: the same argmax
            agree += int((ia == ib).sum())
            total += ia.numel()
            fa, fb = torch.isfinite(la), torch.isfinite(lb)
            both = fa & fb
            if not torch.equal(fa, fb):
                identical = False
            if not bool(both.any()):
                continue
            neither = ~both
            da, db = la.double(), lb.double()
            err = (da - db).abs_().masked_fill_(neither, 0.0)
            worst = float(err.max())
            if worst != 0.0:  # finite x - y == 0 exactly when x == y
                identical = False
            max_abs = max(max_abs, worst)
            max_rel = max(max_rel, float(err.div_(da.abs().clamp_min_(TINY)).masked_fill_(neither, 0.0).max()))
        steps.append(DiffStep(step=k + 1, top1_agreement=agree / max(1, total), max_abs_err=max_abs,
                              max_rel_err=max_rel))
    return steps, identical


def _target_and_prompts(target: Target | str | Path | None,
                        prompts: str | Path | None) -> tuple[Target | None, Any, int | None]:
    """A runnable target (a directory with weights, or one already loaded), the prompts, and the target's layer
    count when known."""
    if prompts is not None and target is None:
        raise UsageError("--prompts needs --target (the model that produces the aux hidden states)")
    if target is None:
        return None, None, None
    if isinstance(target, Target):
        return target, read_prompts(prompts, target.vocab_size) if prompts is not None else None, target.num_layers
    p = Path(target)
    if p.is_dir() and any(p.glob("*.safetensors")):
        t = Target(p)
        return t, read_prompts(prompts, t.vocab_size) if prompts is not None else None, t.num_layers
    if prompts is not None:
        raise UsageError(f"--prompts needs a target directory with safetensors weights; {target} has none")

    return None, None, load_target(target).num_hidden_layers


class OverlaySource:
    """A checkpoint's tensors plus the unit norm weights an engine initialises for tensors it expects but lacks."""

    def __init__(self, base: TensorSource, extra: dict[str, torch.Tensor]):
        self.base, self.extra = base, extra

    def names(self) -> set[str]:
        return self.base.names() | set(self.extra)

    def raw(self, name: str) -> torch.Tensor:
        return self.extra[name] if name in self.extra else self.base.raw(name)

    def label(self, name: str) -> str:
        return name if name in self.extra else stored_name(self.base, name)

    def release(self) -> None:
        self.base.release()


def _missing_norms(spec: DrafterSpec, names: set[str]) -> dict[str, torch.Tensor]:
    K, Ht = spec.aux.count, spec.target_hidden_size
    want: dict[str, int] = {}
    if spec.flags.fc_norm:
        want |= {f"fc_norm.{i}.weight": Ht for i in range(K)}
    if spec.flags.norm_before_fc and architectures.get(spec.architecture).reads_norm_before_fc:
        want["input_norm.weight"] = K * Ht
    return {n: spec.arch.unit_norm(w) for n, w in want.items() if n not in names}


def engine_forward_view(profile: Any, loaded: Any, intended: DrafterSpec, intended_ids: tuple[int, ...],
                        target_layers: int | None) -> tuple[EngineForward, DrafterSpec | None, tuple[int, ...]]:
    """How ``profile`` will run this checkpoint: its flags, its captured layers, whether it loads at all."""
    subject = Subject(dict(loaded.store.config or {}), layout=loaded.layout, read=loaded.read,
                      names=set(loaded.store.tensors), has_tensors=True, path=str(loaded.store.path))
    view = engine_view(profile, subject)
    report = EngineForward(engine=profile.label, runs=False, aux_layer_ids=None)
    fatal = [f.message for check in (check_architecture, check_aux_count) for f in check(subject, view)
             if f.severity == "error"]
    if fatal:
        report.reason = fatal[0]
        return report, None, intended_ids
    # only names the loader raises on stop it; a missing or skipped tensor leaves a value in place (reported below)
    rejected = [f for f in check_keys(subject, view) if f.severity == "error" and f.effect == "load_fails"]
    flags = intended.flags.model_dump()
    for flag in flags:
        if flag in view.flags:
            flags[flag] = view.flags[flag][0]
    report.flags = flags
    for flag, value in flags.items():
        if value != getattr(intended.flags, flag):
            report.differs.append(f"{flag} = {str(value).lower()} ({view.flags[flag][1]}), "
                                  f"the checkpoint means {str(getattr(intended.flags, flag)).lower()}")
    rules = profile.capture
    ids: tuple[int, ...] | None = None
    if rules.from_runtime:
        ids = intended_ids  # the user passes them at launch; assumed right (validate reports it as EC010)
    else:
        for path in (*rules.paths, *(p for p, *_ in rules.some_runners)):
            value = view.config
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, list) and value:
                ids = tuple(rules.shift(tuple(value)))
                break
        if ids is None:
            if target_layers is not None and rules.default_ids is not None:
                ids = tuple(rules.default_ids(target_layers))
                report.differs.append(f"no aux ids in the config: the engine guesses {list(ids)}")
            else:
                ids = intended_ids
                report.differs.append(f"no aux ids in the config: the engine guesses {rules.default}; without "
                                      "--target the layer count is unknown, so the intended layers are used")
    if tuple(sorted(ids)) != tuple(sorted(intended_ids)):
        report.differs.append(f"captures target layers {sorted(ids)}, the checkpoint means {sorted(intended_ids)}")
    report.aux_layer_ids = sorted(ids)
    spec = intended.model_copy(update={"flags": EagleFlags(**flags)})
    if rejected:  # the loader raises on these names; the steps show what it computes were they skipped
        report.reason = rejected[0].message
        report.differs.append(f"the loader rejects {len(rejected)} tensor(s) and the engine would not start; the "
                              "steps show what it would compute if they were skipped")
    report.runs = not rejected
    return report, spec, tuple(sorted(ids))


def _findings_for(results: list[DraftResult], path: str) -> list[Finding]:
    bad = []
    for k in range(len(results[0].logits)):
        finite = all(bool(torch.isfinite(r.feedback[k]).all()) and not bool(torch.isnan(r.logits[k]).any())
                     and bool(torch.isfinite(r.logits[k]).any()) and not bool((r.logits[k] == float("inf")).any())
                     for r in results)
        if not finite:
            bad.append(k + 1)
    if not bad:
        return []
    return [Finding(code="EC070", severity="error", message=f"the forward pass produces NaN or Inf at draft step(s) "
                    f"{bad} (logits or the fed-back hidden state): the drafter proposes garbage")]


def _step_ok(results: list[DraftResult], k: int) -> bool:
    return all(bool(torch.isfinite(r.feedback[k]).all()) and not bool(torch.isnan(r.logits[k]).any()) for r in results)


def _check_backend(backend: str, device: str, dtype: str) -> str | None:
    """Refuse, as a usage error, a backend or device that cannot run; for triton, how its kernels will run."""
    import torch

    from .ops import BACKENDS

    if backend not in BACKENDS:
        raise UsageError(f"unknown forward backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise UsageError(f"unknown device {device!r}") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: no CUDA device is available")
    if backend != "triton":
        return None
    from .. import kernels

    if dtype == "float64":
        raise UsageError("--backend triton computes in float32, bfloat16 or float16; --dtype float64 is the torch "
                         "reference")
    if not kernels.triton_available():
        raise UsageError("--backend triton needs Triton: pip install 'eagleconv[kernels]'")
    path = kernels.path_for(device)
    if path == "torch":
        raise UsageError(f"--backend triton on {kind} runs only through Triton's interpreter: set TRITON_INTERPRET=1 "
                         "(slow; for tests) or use --device cuda")
    return path


def validate_forward(path: str | Path, *, engines: Any = (), steps: int = 4, target: str | Path | None = None,
                     prompts: str | Path | None = None, seed: int = 0, dtype: str = "float32", recipe: str = "native",
                     backend: str = "torch", allow_pickle: bool = False, layout: str | None = None,
                     batch: int = 4, length: int = 8, device: str = "cpu") -> ForwardReport:
    """Run K draft steps of the reference forward and, per engine profile, the drafter as that engine reads it.

    With a ``backend`` other than torch, the torch backend also runs on the same inputs and device, and
    ``against_torch`` holds the per-step max error and top-1 agreement between the two.
    """
    if steps < 1:
        raise UsageError("--steps must be at least 1")
    kernels_path = _check_backend(backend, device, dtype)
    tgt, prompt_list, L = _target_and_prompts(target, prompts)
    drafter = load(path, dtype=dtype, recipe=recipe, backend=backend, seed=seed, target=tgt, allow_pickle=allow_pickle,
                   layout=layout, device=device)
    spec = drafter.spec
    factory = InputFactory(spec.vocab_size, spec.target_hidden_size, target=tgt, prompts=prompt_list, seed=seed,
                           batch=batch, length=length)
    ids = tuple(sorted(default_aux_ids(spec, L)))
    notes = list(drafter.notes)
    if spec.aux.ids is None:
        notes.append(f"the checkpoint states no aux layer ids: using vLLM's default {list(ids)}"
                     + ("" if L is not None else " for an assumed 32-layer target (pass --target)"))
    # Engine views first: a view that differs only in the target layers it captures runs in the same
    # batch as the intended drafter (same weights, one pass over them per step).
    planned: list[tuple[EngineForward, DrafterSpec | None, tuple[int, ...], dict[str, torch.Tensor]]] = []
    loaded = None
    if engines:
        loaded = load_drafter(path, layout=layout, allow_pickle=allow_pickle)
        loaded.store.close()
        names = CheckpointSource(loaded).names()
        for profile in resolve_engines(engines):
            view, espec, eids = engine_forward_view(profile, loaded, spec, ids, L)
            extra = _missing_norms(espec, names) if espec is not None else {}
            if extra:
                view.differs.append(f"initialises {', '.join(sorted(extra))} to ones (absent from the checkpoint)")
            planned.append((view, espec, eids, extra))
    batched = sorted({eids for _, espec, eids, extra in planned if espec == spec and not extra and eids != ids})
    groups = [ids, *batched]
    per_group = [factory.make(g) for g in groups]
    combined = [DraftInputs(torch.cat([g[i].tokens for g in per_group]), torch.cat([g[i].aux for g in per_group]),
                            per_group[0][i].source, ids) for i in range(len(per_group[0]))]
    runs = run_all(drafter, combined, steps)
    sizes = [x.tokens.shape[0] for x in per_group[0]]
    by_group = {g: [_rows(r, n * sizes[i], (n + 1) * sizes[i]) for i, r in enumerate(runs)] for n, g in enumerate(groups)}
    results = by_group[ids]
    out_steps = [ForwardStep(step=k + 1, tokens=[int(t) for r in results for t in r.tokens[k].tolist()],
                             feedback_rms=float(torch.cat([r.feedback[k].double().flatten() for r in results])
                                                .pow(2).mean().sqrt()),
                             finite=_step_ok(results, k)) for k in range(steps)]
    report = ForwardReport(path=str(path), architecture=spec.architecture, eagle_version=spec.eagle_version,
                           compute_dtype=drafter.compute_dtype,
                           output_dtype=str(results[0].logits[0].dtype).removeprefix("torch."),
                           recipe=recipe, backend=backend, inputs=factory.description, aux_layer_ids=list(ids),
                           steps=out_steps, borrowed=drafter.borrowed(), notes=notes,
                           findings=_findings_for(results, str(path)), device=device, kernels=kernels_path)
    if backend != "torch":
        reference = load(path, dtype=dtype, recipe=recipe, backend="torch", seed=seed, target=tgt,
                         allow_pickle=allow_pickle, layout=layout, device=device)
        report.against_torch, _ = compare(run_all(reference, factory.make(ids), steps), results)
    for view, espec, eids, extra in planned:
        if espec is not None:  # run it (also when the loader rejects tensors: what it would compute)
            if espec == spec and not extra:  # the intended math on the layers this engine captures
                view.steps, _ = compare(results, by_group[eids])
            else:
                assert loaded is not None
                base = CheckpointSource(loaded)
                engine_drafter = Drafter(espec, OverlaySource(base, extra) if extra else base, dtype=dtype,
                                         recipe=recipe, backend=backend, seed=seed, target_embed=drafter.w.target_embed,
                                         target_lm_head=drafter.w.target_lm_head, device=device,
                                         cache=drafter.w.cache)
                view.steps, _ = compare(results, run_all(engine_drafter, factory.make(eids), steps))
        report.engines.append(view)
    return report


def diff(a: str | Path, b: str | Path, *, steps: int = 4, target: str | Path | None = None,
         prompts: str | Path | None = None, seed: int = 0, dtype: str = "float32", recipe: str = "native",
         backend: str = "torch", allow_pickle: bool = False, batch: int = 4, length: int = 8) -> DiffReport:
    """Run drafters A and B on identical inputs (each capturing the target layers it means) and compare per step."""
    if steps < 1:
        raise UsageError("--steps must be at least 1")
    tgt, prompt_list, L = _target_and_prompts(target, prompts)
    da = load(a, dtype=dtype, recipe=recipe, backend=backend, seed=seed, target=tgt, allow_pickle=allow_pickle)
    db = load(b, dtype=dtype, recipe=recipe, backend=backend, seed=seed, target=tgt, allow_pickle=allow_pickle)
    for field in ("vocab_size", "target_hidden_size"):
        if getattr(da.spec, field) != getattr(db.spec, field):
            raise UsageError(f"{a} and {b} differ in {field} ({getattr(da.spec, field)} vs {getattr(db.spec, field)}): "
                             "they cannot run on the same inputs")
    factory = InputFactory(da.spec.vocab_size, da.spec.target_hidden_size, target=tgt, prompts=prompt_list, seed=seed,
                           batch=batch, length=length)
    ra = run_all(da, factory.make(default_aux_ids(da.spec, L)), steps)
    rb = run_all(db, factory.make(default_aux_ids(db.spec, L)), steps)
    rows, identical = compare(ra, rb)
    notes = sorted(set(da.notes + db.notes + da.borrowed() + db.borrowed()))
    return DiffReport(identical=identical, steps=rows, a=str(a), b=str(b), compute_dtype=da.compute_dtype,
                      output_dtype=str(ra[0].logits[0].dtype).removeprefix("torch."), inputs=factory.description,
                      notes=notes)


__all__ = ["DictSource", "InputFactory", "StepProgress", "compare", "diff", "engine_forward_view", "validate_forward"]
