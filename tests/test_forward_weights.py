"""Weights.linear: blocks from the cache, the reused upcast buffer or a plain view give the same products."""

from __future__ import annotations

import pytest
import torch

from eagleconv.forward import weights as weights_mod
from eagleconv.forward.weights import BlockCache, DictSource, Weights


def _blockwise(x: torch.Tensor, w: torch.Tensor, step: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.cat([x @ w[r:r + step].to(dtype).T for r in range(0, w.shape[0], step)], dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_blocks_cache_and_buffer_agree_bitwise(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    big = torch.randn(37, 24, generator=g).to(torch.bfloat16)  # 37 rows in blocks of 8: a short last block
    small = torch.randn(5, 24, generator=g).to(torch.bfloat16)  # fits one block
    x = torch.randn(2, 3, 24, generator=g, dtype=dtype)
    monkeypatch.setattr(weights_mod, "BLOCK_BYTES", 8 * 24 * dtype.itemsize)
    cache = BlockCache(2 * 8 * 24 * dtype.itemsize)  # room for two blocks of `big`, not all five
    w = Weights(DictSource({"big": big, "small": small}), dtype, cache=cache)
    want_big, want_small = _blockwise(x, big, 8, dtype), _blockwise(x, small, 8, dtype)

    once = w.linear(x, "big", keep=False)
    assert torch.equal(once, want_big) and cache.used == 0  # a weight used once is never kept
    for _ in range(2):  # first pass fills the cache, second reads it back; the rest goes through the buffer
        assert torch.equal(w.linear(x, "big"), want_big)
        assert torch.equal(w.linear(x, "small"), want_small)
        assert cache.used == 2 * 8 * 24 * dtype.itemsize
    assert w._scratch is not None and w._scratch.dtype == dtype
    # the buffer's contents after a product never leak into a later one (a short block reuses its start)
    assert torch.equal(w.linear(x, "small", keep=False), want_small)
    assert torch.equal(w.linear(x, "big", keep=False), want_big)


def test_linear_without_conversion_reads_the_weight_itself() -> None:
    wt = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    cache = BlockCache(1 << 20)
    w = Weights(DictSource({"w": wt}), torch.float32, cache=cache)
    assert torch.equal(w.linear(x, "w"), x @ wt.T)
    assert cache.used == 0 and w._scratch is None  # nothing copied, nothing kept
