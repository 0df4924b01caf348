"""The RMSNorm operations of a drafter forward, behind one dispatch point.

vLLM's drafter calls three norm shapes: ``rms_norm`` (every plain norm),
``fused_add_rms_norm`` (residual add + norm) and, in EAGLE-3.1's
``combine_hidden_states``, one norm per aux chunk followed by a concatenation
(``fc_norm_concat``).  :func:`get_ops` picks an implementation by ``backend``
("torch" here; a Triton backend registers itself in :data:`BACKENDS`) and by
rounding ``recipe`` (reference/kernels.md §1):

* ``native`` (default): vLLM's IR spec.  Normalise in float32, round to the
  weight dtype, multiply by the weight (a second rounding), cast back; the
  fused add takes its variance from the unrounded float32 sum.
* ``one_round``: the ``vllm_c`` CUDA kernels after #46070.  The fused add
  rounds the sum to the activation dtype first (variance from the rounded
  sum) and the output is rounded once, ``T(x * rsqrt(var + eps) * w)``.

In float32 or float64 compute the recipes coincide up to float32 rounding;
they differ by 1-2 ulp in bf16/fp16 ("as the engine runs it").
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

BACKENDS: dict[str, Callable[[str], NormOps]] = {"torch": lambda recipe: TORCH_OPS[recipe]}
"""backend name -> factory(recipe).  Other backends (Triton) add themselves here."""


def get_ops(backend: str = "torch", recipe: str = "native") -> NormOps:
    """The norm ops for ``backend`` and rounding ``recipe``; ValueError names the choices."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown RMSNorm recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown forward backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return BACKENDS[backend](recipe)
