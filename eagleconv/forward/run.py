"""validate --forward, engine-view forwards and diff: drafters run on identical inputs and compared."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from ..engines import resolve_engines
from ..engines.view import DrafterView, view_drafter
from ..errors import UsageError
from ..readers.loading import load_drafter
from ..spec.report import DiffReport, DiffStep, Finding, ForwardReport, ForwardStep
from ..config.target import load_target
from .api import default_aux_ids, load
from .engine import OverlaySource, fill_tensors, with_fills
from .inputs import InputFactory, Target, read_prompts
from .model import DraftInputs, DraftResult, Drafter
from .weights import CheckpointSource, DictSource


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


def validate_forward(path: str | Path, *, engines: Iterable[str] | str = (), steps: int = 4, target: str | Path | None = None,
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
    planned: list[DrafterView] = []
    loaded = None
    if engines:
        loaded = load_drafter(path, layout=layout, allow_pickle=allow_pickle)
        loaded.store.close()
        planned = [view_drafter(profile, loaded, ids, L) for profile in resolve_engines(engines)]
    batched = sorted({v.layers for v in planned if v.spec == spec and not v.fills and v.layers != ids})
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
    for view in planned:
        if view.spec is not None:  # run it (also when the loader rejects tensors: what it would compute)
            if view.spec == spec and not view.fills:  # the intended math on the layers this engine captures
                view.report.steps, _ = compare(results, by_group[view.layers])
            else:
                assert loaded is not None
                extra = fill_tensors(view.spec, view.fills)
                engine_drafter = Drafter(view.spec, with_fills(CheckpointSource(loaded), extra), dtype=dtype,
                                         recipe=recipe, backend=backend, seed=seed, target_embed=drafter.w.target_embed,
                                         target_lm_head=drafter.w.target_lm_head, device=device,
                                         cache=drafter.w.cache)
                view.report.steps, _ = compare(results, run_all(engine_drafter, factory.make(view.layers), steps))
        report.engines.append(view.report)
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
    notes = sorted(set(da.notes + db.notes + da.borrowed(db)))
    return DiffReport(identical=identical, steps=rows, a=str(a), b=str(b), compute_dtype=da.compute_dtype,
                      output_dtype=str(ra[0].logits[0].dtype).removeprefix("torch."), inputs=factory.description,
                      notes=notes)


__all__ = ["DictSource", "InputFactory", "OverlaySource", "StepProgress", "compare", "diff", "validate_forward"]
