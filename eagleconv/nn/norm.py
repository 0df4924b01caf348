"""The RMSNorm recipes of a drafter forward in plain torch (vLLM's IR spec and its one-rounding CUDA kernels).

``native``: normalise in float32, round to the weight dtype, multiply by the weight (a second rounding), cast
back; the fused add takes its variance from the unrounded float32 sum.  ``one_round``: the ``vllm_c`` kernels
after #46070, the fused add rounds the sum first and the output is rounded once.  :mod:`eagleconv.forward.ops`
dispatches between these and the Triton kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Recipe = Literal["native", "one_round"]
RECIPES: tuple[str, ...] = ("native", "one_round")


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """vLLM normalises in float32; a float64 reference keeps float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass(frozen=True)
class NormOps:
    """rms_norm / fused_add_rms_norm / fc_norm_concat for one backend and recipe."""

    backend: str
    recipe: str
    rms_norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    fused_add_rms_norm: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]

    def fc_norm_concat(self, chunks: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], eps: float) -> torch.Tensor:
        """EAGLE-3.1: one RMSNorm per aux chunk, concatenated (vLLM: N norm calls plus a cat)."""
        return torch.cat([self.rms_norm(c, w, eps) for c, w in zip(chunks, weights)], dim=-1)


def _rms_native(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    a = x.to(acc_dtype(x.dtype))
    y = a * torch.rsqrt(a.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (y.to(w.dtype) * w).to(x.dtype)


def _fused_native(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    acc = acc_dtype(x.dtype)
    s = x.to(acc) + r.to(acc)
    y = s * torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (y.to(w.dtype) * w).to(x.dtype), s.to(x.dtype)


def _rms_one_round(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    acc = acc_dtype(x.dtype)
    a = x.to(acc)
    return (a * torch.rsqrt(a.pow(2).mean(dim=-1, keepdim=True) + eps) * w.to(acc)).to(x.dtype)


def _fused_one_round(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    acc = acc_dtype(x.dtype)
    s = (x.to(acc) + r.to(acc)).to(x.dtype)  # the packed add rounds the sum first
    return _rms_one_round(s, w, eps), s


TORCH_OPS = {
    "native": NormOps("torch", "native", _rms_native, _fused_native),
    "one_round": NormOps("torch", "one_round", _rms_one_round, _fused_one_round),
}
