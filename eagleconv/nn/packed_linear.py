"""float32 products with weights reordered once into oneDNN's blocked layout, as vLLM's CPU backend runs its linears.

``x @ W.T`` through torch's default CPU path (MKL sgemm) repacks W on every call.  With the few activation rows of a
decode step that repacking is most of the cost: on the 2-core VM a SmolLM2 projection ran at 4.7-6 GB/s of weights
while the memory streams 40 GB/s (benchmarks/RESULTS.md).  vLLM 0.32's CPU backend reorders each weight once
(``create_onednn_mm``, model_executor/layers/utils.py) and multiplies with oneDNN; reordering once here too ran the
same products at 10-19 GB/s.  Same float32 arithmetic, in another summation order (differences ~1e-6 relative).

``available()`` probes once that this torch has the ops (internal ``torch.ops.mkldnn`` ops, the ones its inductor
uses for CPU linears) and that they agree with ``torch.nn.functional.linear``; where not, callers keep the plain path.
"""

from __future__ import annotations

from functools import lru_cache

import torch

# oneDNN picks the blocked layout for an expected row count; vLLM passes 32 (decode steps of up to a few dozen rows)
ROWS_HINT = 32


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether this torch reorders and multiplies float32 weights with oneDNN, matching F.linear on a probe."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        g = torch.Generator().manual_seed(0)
        w, x = torch.randn(48, 40, generator=g), torch.randn(3, 40, generator=g)
        got = linear(x, pack(w))
        return bool(torch.allclose(got, torch.nn.functional.linear(x, w), rtol=1e-4, atol=1e-5))
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):  # an older or other torch's ops
        return False


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [out, in] (float32, CPU) reordered for :func:`linear`: a new tensor of the same bytes."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), ROWS_HINT)


def linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` for ``packed = pack(W)``; x [..., in] float32 on the CPU."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")
