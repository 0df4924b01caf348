"""Fused RMSNorm kernels for EAGLE-3.1 drafters: fc_norm + concat in one launch, plain and residual-add RMSNorm.

EAGLE-3.1 puts one RMSNorm per captured hidden state in front of ``fc``; engines
run that as N norm launches plus a ``torch.cat``.  :func:`fc_norm_concat` does
the N norms and the concatenation in ONE Triton launch, each program writing
its rows straight into their column block of the ``[T, N*H]`` output.

Numerics follow vLLM exactly, with the rounding recipe as a parameter
(vLLM: vllm/ir/ops/layernorm.py native IR, csrc/layernorm_kernels.cu one-round):

- ``"native"``: vLLM's native IR op. Normalise in fp32, round to the weight
  dtype, multiply by the weight (the product rounded once in the weight dtype),
  cast to the input dtype.
- ``"one_round"``: vLLM's CUDA kernel since PR #46070. Multiply by the weight in
  fp32 and round once.

Outputs always have the input's dtype.  Which implementation runs, per call:

- CUDA tensors with Triton installed: the Triton kernels.
- CPU tensors with ``TRITON_INTERPRET=1`` set before the first kernel call:
  the same kernels through Triton's CPU interpreter (slow; for tests).
- Otherwise: a plain-PyTorch path with identical semantics (fp32 results may
  differ from the kernels' in the last ulp, from the reduction order).

``impl="triton"`` or ``impl="torch"`` forces one; :func:`path_for` says which
``"auto"`` picks.  Triton is optional (``pip install eagleconv[kernels]``);
nothing else in eagleconv imports this module.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from importlib.util import find_spec
from typing import Literal

import torch
from torch import Tensor

from . import _torch

Recipe = Literal["native", "one_round"]
Impl = Literal["auto", "triton", "torch"]
Path = Literal["triton", "interpreter", "torch"]
VarianceFrom = Literal["fp32_sum", "rounded_sum"]

RECIPES: tuple[str, ...] = ("native", "one_round")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

__all__ = ["RECIPES", "KernelUnavailable", "Recipe", "fc_norm_concat", "fused_add_rms_norm", "path_for", "rms_norm",
           "triton_available"]


class KernelUnavailable(RuntimeError):
    """``impl="triton"`` was asked for where the Triton kernels cannot run."""


@functools.cache
def triton_available() -> bool:
    """Whether Triton is installed (it is only imported when a kernel first runs; checked once per process)."""
    try:
        return find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def _interpret_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def _triton_module():
    from . import _triton as module

    return module


def path_for(device: torch.device | str) -> Path:
    """The implementation ``impl="auto"`` uses for tensors on ``device``."""
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    if not triton_available():
        return "torch"
    if kind == "cpu":
        if not _interpret_requested() and "eagleconv.kernels._triton" not in sys.modules:
            return "torch"
        return "interpreter" if _triton_module().interpreted() else "torch"
    return "interpreter" if _triton_module().interpreted() else "triton"


def _runs_triton(device: torch.device, impl: Impl) -> bool:
    if impl == "torch":
        return False
    path = path_for(device)
    if impl == "triton" and path == "torch":
        if not triton_available():
            raise KernelUnavailable("impl='triton' needs Triton: pip install 'eagleconv[kernels]'")
        raise KernelUnavailable(
            f"the Triton kernels run on {device.type} tensors only through Triton's interpreter: set "
            "TRITON_INTERPRET=1 before the first kernel call, or use CUDA tensors")
    return path != "torch"


def _check_common(recipe: str, impl: str, eps: float) -> None:
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
    if impl not in ("auto", "triton", "torch"):
        raise ValueError(f"impl must be 'auto', 'triton' or 'torch', not {impl!r}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")


def _rows(x: Tensor, name: str) -> Tensor:
    """``x`` as a 2-D ``[T, H]`` view with unit column stride (a copy only when no such view exists)."""
    if x.dtype not in DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not float32, float16 or bfloat16")
    if x.dim() == 0:
        raise ValueError(f"{name}: expected a tensor [..., H], got a scalar")
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 or x2.shape[0] * x2.shape[1] == 0 else x2.contiguous()


def _weight(w: Tensor, hidden: int, name: str) -> Tensor:
    if w.dtype not in DTYPES:
        raise TypeError(f"{name}: dtype {w.dtype} is not float32, float16 or bfloat16")
    if tuple(w.shape) != (hidden,):
        raise ValueError(f"{name}: shape {tuple(w.shape)}, expected ({hidden},)")
    return w.contiguous()


def _output(out: Tensor | None, shape: tuple[int, ...], like: Tensor, name: str) -> tuple[Tensor, Tensor]:
    """(the tensor returned, its 2-D view the kernels write); ``out`` must match exactly."""
    if out is None:
        result = _alloc(shape, like.dtype, like.device)
    else:
        if tuple(out.shape) != shape or out.dtype != like.dtype or out.device != like.device:
            raise ValueError(f"{name}: expected shape {shape}, dtype {like.dtype} on {like.device}; got "
                             f"{tuple(out.shape)}, {out.dtype} on {out.device}")
        result = out
    try:
        view = result.view(-1, shape[-1])
    except RuntimeError:
        raise ValueError(f"{name}: cannot be viewed as [T, {shape[-1]}] without a copy") from None
    if view.stride(-1) != 1 and view.numel():
        raise ValueError(f"{name}: its last dimension must be contiguous")
    return result, view


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """The kernels' own output allocation; a module-level name so a test can poison it."""
    return torch.empty(shape, dtype=dtype, device=device)


def fc_norm_concat(xs: Sequence[Tensor], weights: Sequence[Tensor], eps: float, recipe: Recipe = "native", *,
                   out: Tensor | None = None, impl: Impl = "auto") -> Tensor:
    """``cat([rms_norm(x_i, w_i) for i], -1)`` in one launch: N ``[..., H]`` inputs -> ``[..., N*H]``.

    ``xs`` may be separate tensors or chunk views of one ``[T, N*H]`` buffer
    (read in place); ``weights`` N vectors of length H (or one ``[N, H]``
    tensor), all of one dtype, which may differ from the inputs'.  ``out`` may
    be a view into a larger buffer (e.g. the fc GEMM's input) but must not
    overlap the inputs.  One launch for N <= 8; larger N takes one launch per
    8 inputs.
    """
    _check_common(recipe, impl, eps)
    xs, weights = list(xs), list(weights)
    if not xs:
        raise ValueError("fc_norm_concat needs at least one input")
    if len(weights) != len(xs):
        raise ValueError(f"{len(xs)} inputs but {len(weights)} weights")
    first = xs[0]
    for i, x in enumerate(xs):
        if x.shape != first.shape or x.dtype != first.dtype or x.device != first.device:
            raise ValueError(f"xs[{i}]: shape {tuple(x.shape)}, {x.dtype} on {x.device} differs from xs[0]: "
                             f"{tuple(first.shape)}, {first.dtype} on {first.device}")
    rows = [_rows(x, f"xs[{i}]") for i, x in enumerate(xs)]
    hidden = rows[0].shape[1]
    ws = [_weight(w, hidden, f"weights[{i}]") for i, w in enumerate(weights)]
    if any(w.dtype != ws[0].dtype or w.device != first.device for w in ws):
        raise ValueError(f"weights must share one dtype and sit on {first.device}")
    shape = (*first.shape[:-1], len(xs) * hidden)
    result, out2 = _output(out, shape, first, "out")
    if out2.numel() == 0:
        return result
    if _runs_triton(first.device, impl):
        _triton_module().fc_norm_concat(rows, ws, eps, recipe, out2)
    else:
        _torch.fc_norm_concat(rows, ws, eps, recipe, out2)
    return result


def rms_norm(x: Tensor, w: Tensor, eps: float, recipe: Recipe = "native", *,
             out: Tensor | None = None, impl: Impl = "auto") -> Tensor:
    """RMSNorm over the last dimension of ``x`` with weight ``w``; same dtype and shape as ``x``."""
    return fc_norm_concat([x], [w], eps, recipe, out=out, impl=impl)


def fused_add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, eps: float, recipe: Recipe = "native", *,
                       variance_from: VarianceFrom = "fp32_sum", out: Tensor | None = None,
                       residual_out: Tensor | None = None, impl: Impl = "auto") -> tuple[Tensor, Tensor]:
    """``(rms_norm(x + residual), x + residual)`` with vLLM's native semantics, in one launch.

    The sum is taken in fp32; the new residual is that sum rounded once to
    ``x``'s dtype, and the variance comes from the unrounded fp32 sum (vLLM's
    native op).  ``variance_from="rounded_sum"`` takes it from the rounded
    residual instead, as vLLM's CUDA kernel does (issue #52104).  Returns new
    tensors; the inputs are not modified.
    """
    _check_common(recipe, impl, eps)
    if variance_from not in ("fp32_sum", "rounded_sum"):
        raise ValueError(f"variance_from must be 'fp32_sum' or 'rounded_sum', not {variance_from!r}")
    if residual.shape != x.shape or residual.device != x.device:
        raise ValueError(f"residual: shape {tuple(residual.shape)} on {residual.device}, expected "
                         f"{tuple(x.shape)} on {x.device}")
    x2, r2 = _rows(x, "x"), _rows(residual, "residual")
    w2 = _weight(w, x2.shape[1], "w")
    if w2.device != x.device:
        raise ValueError(f"w: on {w2.device}, expected {x.device}")
    result, out2 = _output(out, tuple(x.shape), x, "out")
    new_residual, res2 = _output(residual_out, tuple(x.shape), x, "residual_out")
    if out2.numel() == 0:
        return result, new_residual
    if _runs_triton(x.device, impl):
        _triton_module().fused_add_rms_norm(x2, r2, w2, eps, recipe, out2, res2, variance_from == "rounded_sum")
    else:
        _torch.fused_add_rms_norm(x2, r2, w2, eps, recipe, out2, res2, variance_from == "rounded_sum")
    return result, new_residual
