"""EAGLE-3 <-> EAGLE-3.1: the math of ``upgrade`` and ``downgrade``, as transforms over canonical tensors.

Math only: tensors in, tensors and a plan out.  The orchestration (the source, calibration, measuring the
divergence, the writer, the report) is :mod:`eagleconv.eagle31.api`; the calibration file is :mod:`eagleconv.readers.calibration`.

How the aux hidden states ``a_1..a_K`` (each ``Ht`` wide) reach the decoder
(vLLM: combine_hidden_states in llama_eagle3.py)::

    EAGLE-3                    g = fc(cat(a_i))
    norm_before_fc             g = fc(rms(cat(a_i)) * w_in)
    fc_norm (EAGLE-3.1)        g = fc(cat(rms(a_i) * w_i))

with ``rms(x) = x / sqrt(mean(x^2) + eps)``.  A norm weight is a per-column
scale of fc's input, so it folds exactly into fc's matching column block
(``fc[:, block i] * w_i``), leaving a unit-weight norm: the *exact* step.
Removing the normalisation itself, or norm_output's post-norm feedback,
changes the function: the *lossy* step, allowed only when asked.

Adding a norm (upgrade) initialises its weight so the norm preserves the
typical scale of its input, from captured aux states: per channel ``c`` the
least-squares ``w[c] = sum_t a_t[c]^2 / r_t / sum_t a_t[c]^2 / r_t^2`` (``r_t``
the token's RMS), so ``rms(a_t) * w ~= a_t`` and fc sees what it was trained
on.  Removing a norm (downgrade) folds in the matching scalar
``c = sum_t r_t / sum_t r_t^2`` so ``a_t * c ~= rms(a_t)``.  Without
captured states the weights are 1 and the report says so.

Folds are computed in float64 and rounded once to the stored dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .. import architectures
from ..conversion.transform import Computed, Transform
from ..spec.drafter import DrafterSpec
from ..errors import ConversionError, UsageError

if TYPE_CHECKING:
    import torch

    from ..readers.loading import LoadedDrafter

Style = Literal["fc_norm", "norm_before_fc"]
FOLD_ROWS = 1024  # fc rows folded at a time: float64 temporaries stay ~ rows x K*Ht x 8 bytes


# -- the math (plain functions of tensors) ------------------------------------------

def rms_of_rows(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Each row's RMS (as RMSNorm divides by it), float64."""
    x = x.double()
    return (x.pow(2).mean(-1) + eps).sqrt()


def scale_preserving_weight(states: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-channel RMSNorm weight w minimising sum_t ||rms(a_t) * w - a_t||^2 over ``states`` [N, D]; float64."""
    import torch

    a = states.double().reshape(-1, states.shape[-1])
    r = rms_of_rows(a, eps).unsqueeze(-1)
    energy = a.pow(2)
    num = (energy / r).sum(0)
    den = (energy / r.pow(2)).sum(0)
    fallback = r.mean()  # a channel that is always zero: any weight fits; keep the typical scale
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(torch.float64).tiny), fallback)


def unnormalising_scale(states: torch.Tensor, eps: float) -> float:
    """Scalar c minimising sum_t ||a_t * c - rms(a_t)||^2: what removing an RMSNorm from ``states`` [N, D] needs."""
    a = states.double().reshape(-1, states.shape[-1])
    r = rms_of_rows(a, eps)
    squares = a.pow(2).sum(-1)  # ||a_t||^2
    return float((squares / r).sum() / squares.sum())


def fold_columns(fc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``fc * scale`` column-wise (scale is fc's input width), in float64 row blocks, rounded once to fc's dtype."""
    import torch

    out = torch.empty_like(fc)
    s = scale.double()
    for start in range(0, fc.shape[0], FOLD_ROWS):
        block = fc[start:start + FOLD_ROWS].double() * s
        out[start:start + FOLD_ROWS] = block.to(fc.dtype)
    return out


# -- refit: the weights the new norms make stale ---------------------------------------
#
# A norm divides each token by its own RMS, which no per-channel weight undoes, so calibration also refits
# what reads the normalised state.  fc: the least-squares fc' with fc'(x_t) ~= fc(a_t) over the captured
# tokens (x_t the normalised aux states), pulled towards the scale-preserving fold where the data leave it
# free.  norm_output: the next step is fed out = rms(pre) * norm.weight instead of pre; choosing norm.weight
# scale-preserving over the source's pre-norm states makes out ~= pre, and dividing the change into
# lm_head's columns keeps every logit exactly as it was.

REFIT_PRIOR = 1e-2  # ridge strength towards the folded fc, relative to the mean input energy per channel
HOLD_OUT_EVERY = 5  # every 5th calibration token is held out once, to report the fit's held-out residual


def normalised(states: torch.Tensor, style: Style, weights: Sequence[torch.Tensor], eps: float) -> torch.Tensor:
    """What fc reads after the new norms: [N, K, Ht] aux states -> [N, K*Ht], float64 (vLLM's combine)."""
    import torch

    a = states.double()
    if style == "fc_norm":
        parts = [a[:, i] / rms_of_rows(a[:, i], eps).unsqueeze(-1) * w.double() for i, w in enumerate(weights)]
        return torch.cat(parts, -1)
    flat = a.reshape(a.shape[0], -1)
    return flat / rms_of_rows(flat, eps).unsqueeze(-1) * weights[0].double()


def _ridge_solve(gram: torch.Tensor, rhs: torch.Tensor, prior: torch.Tensor, strength: float) -> torch.Tensor:
    import torch

    lam = strength * float(gram.diagonal().mean())
    a = gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype)
    factor, info = torch.linalg.cholesky_ex(a)
    if int(info) != 0:  # states with no energy (all zero after the norms): one line, not torch's _LinAlgError
        raise UsageError("the calibration states are degenerate (no energy after the new norms): fc cannot be "
                         "refitted to them; capture the target's states again, or pass --no-refit")
    return torch.cholesky_solve(rhs + lam * prior.T, factor).T.contiguous()


def least_squares_refit(x: torch.Tensor, y: torch.Tensor, prior: torch.Tensor, strength: float = REFIT_PRIOR,
                        hold_out: int = HOLD_OUT_EVERY) -> tuple[torch.Tensor, float | None]:
    """W [out, in] minimising sum_t ||W x_t - y_t||^2 / ||y_t||^2 + lam ||W - prior||^2, float64, and its
    held-out residual.

    W maps the new inputs x [N, in] to the old outputs y [N, out].  Each token counts by its relative error:
    an attention-sink token's states are ~100x the others' and would otherwise decide the whole fit.
    lam = strength x the mean diagonal of the weighted x^T x keeps it posed with fewer tokens than inputs.
    The held-out residual is the same fit without every ``hold_out``-th token, measured on those (None with
    under ``hold_out`` x 4 tokens): the in-sample residual of a wide fit on few tokens flatters it.
    """
    x, y, prior = x.double(), y.double(), prior.double()
    scale = y.pow(2).sum(-1, keepdim=True).clamp_min(1e-300).rsqrt()
    xw, yw = x * scale, y * scale
    gram, rhs = xw.T @ xw, xw.T @ yw
    fitted = _ridge_solve(gram, rhs, prior, strength)
    if x.shape[0] < hold_out * 4:
        return fitted, None
    xh, yh = xw[hold_out - 1::hold_out], yw[hold_out - 1::hold_out]
    partial = _ridge_solve(gram - xh.T @ xh, rhs - xh.T @ yh, prior, strength)
    return fitted, relative_residual(x[hold_out - 1::hold_out] @ partial.T, y[hold_out - 1::hold_out])


def relative_residual(predicted: torch.Tensor, wanted: torch.Tensor) -> float:
    """mean_t ||predicted_t - wanted_t||^2 / ||wanted_t||^2: how much of each token's old output the refit misses."""
    p, w = predicted.double().reshape(-1, predicted.shape[-1]), wanted.double().reshape(-1, wanted.shape[-1])
    return float(((p - w).pow(2).sum(-1) / w.pow(2).sum(-1).clamp_min(1e-300)).mean())


def output_norm_refit(pre: torch.Tensor, norm: torch.Tensor, lm_head: torch.Tensor,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """norm_output's compensation: (norm.weight', lm_head', residual before, after), float64.

    ``pre`` [N, H]: the source's pre-norm states (what EAGLE-3 feeds back).  norm.weight' makes
    rms(pre) * norm.weight' ~= pre (least squares, each token by its relative error);
    lm_head' = lm_head * norm.weight / norm.weight' column-wise, so
    lm_head'(rms(pre) * norm.weight') == lm_head(rms(pre) * norm.weight): the logits do not change.
    """
    import torch

    p = pre.double()
    unit = p / rms_of_rows(p, eps).unsqueeze(-1)
    inv = p.pow(2).sum(-1, keepdim=True).clamp_min(1e-300).reciprocal()  # per-token relative error, as above
    num, den = (unit * p * inv).sum(0), (unit.pow(2) * inv).sum(0)
    new = torch.where(den > 0, num / den.clamp_min(torch.finfo(torch.float64).tiny), norm.double())
    head = lm_head.double() * (norm.double() / new)
    return new, head, relative_residual(unit * norm.double(), p), relative_residual(unit * new, p)


# -- building transforms ------------------------------------------------------------------

@dataclass
class Plan:
    """A transform plus what the report needs: each change with whether it is exact, and the unit-weight variant."""

    transform: Transform
    changes: list[tuple[str, bool]] = field(default_factory=list)  # (what, exact)
    initialisation: Literal["calibrated", "unit"] | None = None
    unit_variant: dict[str, torch.Tensor] | None = None  # upgrade: the new norms with unit weights (for divergence)
    new_tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # everything computed, as tensors
    refits: list[Refit] = field(default_factory=list)


@dataclass
class Refit:
    """One least-squares refit: the tensors it rewrote, against what, and the fit residual before and after."""

    tensors: list[str]
    fitted: str  # what the refit reproduces, in words
    tokens: int
    residual_before: float  # mean over the calibration tokens of ||new - old||^2 / ||old||^2
    residual_after: float
    residual_held_out: float | None = None  # the fit without every 5th token, measured on those


def _eps(spec: DrafterSpec) -> float:
    if spec.rms_norm_eps is None:
        raise ConversionError("rms_norm_eps is unknown (absent from the config and no layout default): the norm "
                              "weights cannot be computed; state rms_norm_eps in config.json")
    return float(spec.rms_norm_eps)


def _computed(name: str, tensor: torch.Tensor, reason: str) -> Computed:
    from ..io.torch_tensors import tensor_bytes

    dtype, shape, data = tensor_bytes(tensor)
    return Computed(name, dtype, shape, data, reason)


def _weight_dtype(tensors: Mapping[str, torch.Tensor]) -> torch.dtype:
    return tensors["fc.weight"].dtype


def plan_upgrade(loaded: LoadedDrafter, *, style: Style = "fc_norm", fc_norm: bool = True, norm_output: bool = True,
                 calibration: torch.Tensor | None = None, refit: bool = True,
                 feedback: torch.Tensor | None = None) -> Plan:
    """EAGLE-3 -> 3.1: add the aux-state normalisation (in ``style``) and/or norm_output.

    With ``calibration`` [N, K, Ht] and ``refit``, fc is refitted to the new norms; with ``feedback`` (the
    source's pre-norm states [N, H] on those tokens) norm.weight and lm_head compensate norm_output.
    """
    import torch

    spec = loaded.require_spec()
    flags = spec.flags
    if not flags.use_aux_hidden_state and fc_norm:
        raise ConversionError("this drafter has no fc (use_aux_hidden_state = false): there is nothing to normalise; "
                              "pass --no-fc-norm")
    if fc_norm and style == "norm_before_fc" and not architectures.get(spec.architecture).reads_norm_before_fc:
        raise ConversionError(f"{spec.architecture} drafters have no input_norm (vLLM's loader rejects one): use "
                              "--style fc_norm")
    already = flags.fc_norm or flags.norm_before_fc
    add_norm = fc_norm and not already
    changes: list[tuple[str, bool]] = []
    notes: list[str] = []
    if fc_norm and already:
        have = "fc_norm" if flags.fc_norm else "norm_before_fc"
        if have != style:
            raise ConversionError(f"the drafter already normalises its aux states with {have}; adding {style} on top "
                                  "is not a style any trainer uses (pass --no-fc-norm, or --style " + have + ")")
        notes.append(f"{style} is already on; unchanged")
    if norm_output and flags.norm_output:
        notes.append("norm_output is already on; unchanged")
    new_flags = flags.model_copy(update={
        "fc_norm": flags.fc_norm or (add_norm and style == "fc_norm"),
        "norm_before_fc": flags.norm_before_fc or (add_norm and style == "norm_before_fc"),
        "norm_output": flags.norm_output or norm_output,
    })
    new_spec = spec.model_copy(update={"flags": new_flags})
    transform = Transform("upgrade", new_spec, notes=notes)
    plan = Plan(transform, changes)
    if add_norm:
        with loaded.torch_tensors() as tensors:
            dtype = _weight_dtype(tensors)
        K, Ht = spec.aux.count, spec.target_hidden_size
        if calibration is not None:
            eps = _eps(spec)
            if style == "fc_norm":
                weights = {f"fc_norm.{i}.weight": spec.arch.norm_stored(scale_preserving_weight(calibration[:, i, :], eps))
                           for i in range(K)}
            else:
                weights = {"input_norm.weight": spec.arch.norm_stored(
                    scale_preserving_weight(calibration.reshape(-1, K * Ht), eps))}
            plan.initialisation = "calibrated"
            how = f"scale-preserving from {calibration.shape[0]} captured tokens"
        else:
            shapes = {f"fc_norm.{i}.weight": Ht for i in range(K)} if style == "fc_norm" else {"input_norm.weight": K * Ht}
            weights = {n: spec.arch.unit_norm(w, dtype=torch.float64) for n, w in shapes.items()}
            plan.initialisation = "unit"
            how = "unit weights (no calibration states: pass --calibration, or --target with --prompts)"
            notes.append("new norm weights are 1.0: without captured aux states eagleconv cannot preserve each input's "
                         "scale, so fc sees normalised inputs it was not trained on")
        for name, w in weights.items():
            stored = w.to(dtype)
            plan.new_tensors[name] = stored
            transform.computed[name] = _computed(name, stored, f"new {style} weight: {how}")
        plan.unit_variant = {n: spec.arch.unit_norm(*t.shape, dtype=t.dtype) for n, t in plan.new_tensors.items()}
        what = "one RMSNorm per aux state" if style == "fc_norm" else "one RMSNorm over the concatenation"
        changes.append((f"add {style} ({what}), weights {plan.initialisation}", False))
        if calibration is not None and refit:
            _refit_fc(loaded, plan, calibration, style, [spec.arch.norm_scale(plan.new_tensors[n]) for n in weights])
    if norm_output and not flags.norm_output:
        changes.append(("add norm_output: feed the post-norm hidden state to the next draft step", False))
        if feedback is not None and refit:
            _refit_output_norm(loaded, plan, feedback)
    transform.exact = all(exact for _, exact in changes)
    return plan


def _store(plan: Plan, name: str, tensor: torch.Tensor, dtype: torch.dtype, reason: str) -> None:
    stored = tensor.to(dtype).contiguous()
    plan.new_tensors[name] = stored
    plan.transform.computed[name] = _computed(name, stored, reason)


def _refit_fc(loaded: LoadedDrafter, plan: Plan, calibration: torch.Tensor, style: Style,
              weights: Sequence[torch.Tensor]) -> None:
    """fc' with fc'(normalised a_t) ~= fc(a_t) over the calibration tokens (least squares, see above)."""
    spec = loaded.require_spec()
    eps = _eps(spec)
    with loaded.torch_tensors() as tensors:
        fc = tensors["fc.weight"]
        dtype = fc.dtype
        fc64 = fc.double()
    x = normalised(calibration, style, weights, eps)
    wanted = calibration.reshape(calibration.shape[0], -1).double() @ fc64.T
    fitted, held = least_squares_refit(x, wanted, fc64)
    stored = fitted.to(dtype)
    before, after = relative_residual(x @ fc64.T, wanted), relative_residual(x @ stored.double().T, wanted)
    _store(plan, "fc.weight", stored, dtype, f"refit by least squares to the new {style} on {x.shape[0]} captured "
                                              f"tokens (relative residual {before:.3g} -> {after:.3g})")
    plan.refits.append(Refit(["fc.weight"], f"fc(a) of the EAGLE-3 drafter, from the {style}-normalised aux states",
                             x.shape[0], before, after, held))
    plan.changes.append((f"refit fc to the {style} inputs (least squares on the captured aux states)", False))


def _refit_output_norm(loaded: LoadedDrafter, plan: Plan, feedback: torch.Tensor) -> None:
    """norm.weight so the post-norm feedback ~= the pre-norm one, lm_head divided so the logits stay put."""
    spec = loaded.require_spec()
    if spec.lm_head == "target":
        plan.transform.notes.append("norm_output not compensated: lm_head is the target's, so norm.weight cannot "
                                    "change without changing the logits")
        return
    with loaded.torch_tensors() as tensors:
        norm, head = tensors["norm.weight"], tensors["lm_head.weight"]
        norm_dtype, head_dtype = norm.dtype, head.dtype
        new_norm, new_head, before, after = output_norm_refit(feedback, spec.arch.norm_scale(norm), head, _eps(spec))
        new_norm = spec.arch.norm_stored(new_norm)
    _store(plan, "norm.weight", new_norm, norm_dtype, "scale-preserving over the source's pre-norm states, so the "
                                                      f"fed-back state keeps their scale ({before:.3g} -> {after:.3g})")
    _store(plan, "lm_head.weight", new_head, head_dtype, "columns times old/new norm.weight: the logits are unchanged")
    plan.refits.append(Refit(["norm.weight", "lm_head.weight"], "the EAGLE-3 drafter's fed-back pre-norm state, "
                             "from the post-norm one (logits unchanged)", feedback.shape[0], before, after))
    plan.changes.append(("refit norm.weight to the pre-norm states and fold the change into lm_head (logits "
                         "unchanged)", False))


def plan_downgrade(loaded: LoadedDrafter, *, allow_lossy: bool = False, calibration: torch.Tensor | None = None) -> Plan:
    """EAGLE-3.1 -> 3: fold fc_norm weights into fc (exact), then remove fc_norm and norm_output (lossy)."""
    spec = loaded.require_spec()
    flags = spec.flags
    changes: list[tuple[str, bool]] = []
    notes: list[str] = []
    new_spec = spec.model_copy(update={"flags": flags.model_copy(update={"fc_norm": False, "norm_output": False})})
    transform = Transform("downgrade", new_spec, notes=notes)
    plan = Plan(transform, changes)
    if flags.fc_norm and not flags.use_aux_hidden_state:
        changes.append(("drop fc_norm: a no-op without aux hidden states (use_aux_hidden_state = false)", True))
        for name in loaded.read.canonical:
            if name.startswith("fc_norm."):
                transform.removed[name] = "fc_norm is a no-op without aux hidden states"
    elif flags.fc_norm:
        K, Ht = spec.aux.count, spec.target_hidden_size
        import torch

        with loaded.torch_tensors() as tensors:
            fc = tensors["fc.weight"]
            scale = torch.cat([spec.arch.norm_scale(tensors[f"fc_norm.{i}.weight"].double()) if f"fc_norm.{i}.weight" in tensors
                               else torch.ones(Ht, dtype=torch.float64) for i in range(K)])
            compensation = torch.ones(K, dtype=torch.float64)
            if calibration is not None:
                eps = _eps(spec)
                compensation = torch.tensor([unnormalising_scale(calibration[:, i, :], eps) for i in range(K)],
                                            dtype=torch.float64)
            folded = fold_columns(fc, scale * compensation.repeat_interleave(Ht))
        plan.new_tensors["fc.weight"] = folded
        transform.computed["fc.weight"] = _computed(
            "fc.weight", folded, "fc_norm weights folded into fc's column blocks"
            + (" with each aux state's typical 1/RMS (calibrated)" if calibration is not None else ""))
        for i in range(K):
            if f"fc_norm.{i}.weight" in loaded.read.canonical:
                transform.removed[f"fc_norm.{i}.weight"] = "folded into fc.weight; the norm is removed (EAGLE-3)"
        changes.append(("fold each fc_norm weight into fc's matching column block (unit-weight norms remain)", True))
        changes.append(("remove the unit-weight fc_norm normalisation"
                        + (" (compensated by each aux state's typical 1/RMS from calibration)" if calibration is not None
                           else " (uncompensated: pass --calibration to fold in each aux state's typical 1/RMS)"), False))
    if flags.norm_output:
        changes.append(("remove norm_output: feed the pre-norm hidden state to the next draft step", False))
    transform.exact = all(exact for _, exact in changes)
    if not transform.exact and not allow_lossy:
        lossy = "; ".join(what for what, exact in changes if not exact)
        raise ConversionError(f"downgrading changes what the drafter computes ({lossy}); nothing was written. Pass "
                              "--allow-lossy to accept it (the report then measures the divergence)", loaded.store.path)
    if not changes:
        notes.append("already an EAGLE-3 drafter: nothing to change")
    return plan


def check_style(style: str) -> Style:
    if style not in ("fc_norm", "norm_before_fc"):
        raise UsageError(f"unknown --style {style!r}; choose fc_norm or norm_before_fc")
    return style  # type: ignore[return-value]
