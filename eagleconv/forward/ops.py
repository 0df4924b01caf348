"""The RMSNorm operations of a drafter forward, behind one dispatch point.

vLLM's drafter calls three norm shapes: ``rms_norm`` (every plain norm),
``fused_add_rms_norm`` (residual add + norm) and, in EAGLE-3.1's
``combine_hidden_states``, one norm per aux chunk followed by a concatenation
(``fc_norm_concat``).  :func:`get_ops` picks an implementation by ``backend``
("torch": the formulas in :mod:`eagleconv.nn.norm`; "triton": eagleconv.kernels' fused kernels) and by
rounding ``recipe``, as in vLLM (vllm/ir/ops/layernorm.py and csrc/layernorm_kernels.cu):

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
from typing import Any

import torch

from ..errors import UsageError
from ..nn.norm import RECIPES, TORCH_OPS, NormOps, Recipe, acc_dtype

__all__ = ["BACKENDS", "RECIPES", "TORCH_OPS", "KernelOps", "NormOps", "Recipe", "acc_dtype", "get_ops"]


class KernelOps(NormOps):
    """The fused Triton kernels of eagleconv.kernels: fc_norm_concat is one launch, not N norms plus a cat."""

    def fc_norm_concat(self, chunks: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], eps: float) -> torch.Tensor:
        from .. import kernels

        return _kernel_call(kernels.fc_norm_concat, list(chunks), list(weights), eps, self.recipe, impl="triton")


def _kernel_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one eagleconv.kernels function; what the kernels cannot do is a usage error, not a traceback."""
    from .. import kernels

    x = args[0][0] if isinstance(args[0], list) else args[0]
    if x.dtype not in kernels.DTYPES:
        raise UsageError(f"the triton backend computes in float32, bfloat16 or float16, not {x.dtype} "
                         "(--dtype float64 is the torch reference)")
    try:
        return fn(*args, **kwargs)
    except kernels.KernelUnavailable as exc:
        raise UsageError(f"--backend triton: {exc}") from None


def _triton_ops(recipe: str) -> NormOps:
    """The same recipes through eagleconv.kernels (Triton on CUDA; its interpreter on CPU with TRITON_INTERPRET=1).

    The one_round fused add takes its variance from the rounded sum, as vllm_c does and as the torch ops above do.
    """
    from .. import kernels

    variance_from = "fp32_sum" if recipe == "native" else "rounded_sum"
    return KernelOps(
        "triton", recipe,
        lambda x, w, eps: _kernel_call(kernels.rms_norm, x, w, eps, recipe, impl="triton"),
        lambda x, r, w, eps: _kernel_call(kernels.fused_add_rms_norm, x, r, w, eps, recipe,
                                          variance_from=variance_from, impl="triton"))


BACKENDS: dict[str, Callable[[str], NormOps]] = {"torch": lambda recipe: TORCH_OPS[recipe], "triton": _triton_ops}
"""backend name -> factory(recipe)."""


def get_ops(backend: str = "torch", recipe: str = "native") -> NormOps:
    """The norm ops for ``backend`` and rounding ``recipe``; ValueError names the choices."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown RMSNorm recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown forward backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return BACKENDS[backend](recipe)
