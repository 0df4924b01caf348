"""The plain-PyTorch path of eagleconv.kernels: vLLM's native formulas, written out.

Used on CPU tensors when Triton's interpreter is not active, and wherever
Triton is not installed.  Same semantics as the Triton kernels (same
roundings, fp32 reductions); the reduction order is torch's, so fp32 results
may differ from the kernels' in the last ulp.
"""

from __future__ import annotations

import torch
from torch import Tensor


def normalize_into(out: Tensor, x32: Tensor, w: Tensor, eps: float, recipe: str) -> None:
    """Write RMSNorm(x32) * w, rounded as ``recipe`` says, into ``out`` (x32 is float32, rows = last dim)."""
    variance = x32.pow(2).mean(dim=-1, keepdim=True)
    y = x32 * torch.rsqrt(variance + eps)
    if recipe == "native":
        # vLLM IR native: round to the weight dtype, multiply (torch rounds the product once), cast to the output dtype.
        out.copy_(y.to(w.dtype) * w)
    else:
        # vLLM CUDA one-round: multiply by the weight in fp32, round once.
        out.copy_(y * w.to(torch.float32))


def fc_norm_concat(xs: list[Tensor], weights: list[Tensor], eps: float, recipe: str, out: Tensor) -> None:
    hidden = xs[0].shape[-1]
    for g, (x, w) in enumerate(zip(xs, weights)):
        normalize_into(out[:, g * hidden:(g + 1) * hidden], x.to(torch.float32), w, eps, recipe)


def fused_add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, eps: float, recipe: str,
                       out: Tensor, residual_out: Tensor, rounded_sum: bool) -> None:
    # Sum in fp32, return the residual rounded once; the variance from the unrounded fp32 sum (native)
    # or from the rounded residual (vllm_c).
    s = x.to(torch.float32) + residual.to(torch.float32)
    residual_out.copy_(s)
    normalize_into(out, residual_out.to(torch.float32) if rounded_sum else s, w, eps, recipe)
