"""Weights.linear: blocks from the cache, the reused upcast buffer or a plain view give the same products."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eagleconv.forward import weights as weights_mod
from eagleconv.forward.weights import BlockCache, DictSource, Weights

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


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


def test_prefetch_asks_for_every_tensor_but_the_skipped_ones_in_file_order(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import threading

    from eagleconv.forward.weights import CheckpointSource
    from eagleconv.loading import load_drafter

    loaded = load_drafter(FIXTURES / "speculators-llama-eagle31")  # stores embed_tokens, which only rows are read of
    loaded.store.close()
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, start, length, advice: asked.append((start, length)))
    before = set(threading.enumerate())
    CheckpointSource(loaded).prefetch(skip={"embed_tokens.weight"})
    for t in set(threading.enumerate()) - before:
        t.join(timeout=10)
    locations = loaded.store._locations  # type: ignore[attr-defined]
    want = sorted((locations[stored].start, locations[stored].end - locations[stored].start)
                  for name, stored in loaded.read.canonical.items() if name != "embed_tokens.weight")
    assert asked == want and len(want) == len(loaded.read.canonical) - 1
