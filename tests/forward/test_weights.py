"""Weights.linear: blocks from the cache, the reused upcast buffer or a plain view give the same products."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eagleconv.forward import weights as weights_mod
from eagleconv.forward.weights import BlockCache, DictSource, Weights

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


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
    from eagleconv.readers.loading import load_drafter

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


# ---- packed linears (simulate: weights reordered once for oneDNN, as vLLM's CPU backend runs them) -------------

packed_linear = pytest.importorskip("eagleconv.nn.packed_linear")
needs_onednn = pytest.mark.skipif(not packed_linear.available(), reason="this torch has no usable oneDNN")


@needs_onednn
def test_packed_linear_is_f_linear_in_another_summation_order() -> None:
    g = torch.Generator().manual_seed(11)
    w, bias = torch.randn(70, 48, generator=g), torch.randn(70, generator=g)
    for rows in (1, 4, 16, 33):
        x = torch.randn(1, rows, 48, generator=g)
        got = packed_linear.linear(x, packed_linear.pack(w))
        torch.testing.assert_close(got, torch.nn.functional.linear(x, w), rtol=1e-5, atol=1e-5)
    plain = Weights(DictSource({"w": w, "b": bias}), torch.float32).linear(x, "w", "b")
    packed = Weights(DictSource({"w": w, "b": bias}), torch.float32, pack=True)
    assert packed.packs
    torch.testing.assert_close(packed.linear(x, "w", "b"), plain, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_packing_in_blocks_drops_each_blocks_source_pages_and_keeps_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight packed in row blocks: the source is told to drop each block's bytes as it is packed, then the
    whole weight; the products equal the unpacked ones; a weight used once (keep=False) is not packed."""
    g = torch.Generator().manual_seed(12)
    w, once = torch.randn(37, 16, generator=g), torch.randn(5, 16, generator=g)
    dropped: list[tuple[int, int]] = []
    monkeypatch.setattr(weights_mod, "PACK_BYTES", 8 * 16 * 4)  # 8 rows per block: 5 blocks, a short last one
    monkeypatch.setattr(weights_mod, "PACK_MIN_BYTES", 0)
    src = DictSource({"w": w, "once": once}, {"w": lambda lo, hi: dropped.append((lo, hi))})
    x = torch.randn(1, 3, 16, generator=g)
    want = x @ w.T
    weights = Weights(src, torch.float32, pack=True)
    assert weights.packs
    torch.testing.assert_close(weights.linear(x, "w"), want, rtol=1e-5, atol=1e-5)
    row = 16 * 4
    assert dropped == [(r * row, (r + 8) * row) for r in range(0, 37, 8)] + [(0, 37 * row)]
    assert weights._packed is not None and len(weights._packed["w"]) == 5
    torch.testing.assert_close(weights.linear(x, "w"), want, rtol=1e-5, atol=1e-5)  # from the packed blocks
    assert torch.equal(weights.linear(x, "once", keep=False), x @ once.T) and "once" not in weights._packed
    monkeypatch.setattr(weights_mod, "PACK_MIN_BYTES", once.numel() * 4 + 1)  # below the line: torch's matmul
    assert torch.equal(weights.linear(x, "once"), x @ once.T) and weights.packed_weights == 1


def test_packing_declines_where_it_does_not_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    w = {"w": torch.randn(4, 4)}
    assert not Weights(DictSource(w), torch.float32).packs  # only when asked for, at construction
    assert not Weights(DictSource(w), torch.float64, pack=True).packs  # float32 only
    monkeypatch.setenv("EAGLECONV_PACKED_LINEARS", "0")
    assert not Weights(DictSource(w), torch.float32, pack=True).packs


def test_resident_source_forgets_its_copy_once_the_whole_weight_is_packed() -> None:
    from eagleconv.forward.weights import ResidentSource

    src = ResidentSource(DictSource({"w": torch.ones(3, 2)}))
    kept = src.raw("w")
    src.drop("w", (0, 8))  # one block: still needed for the others
    assert src.raw("w") is kept
    src.drop("w")
    assert src.raw("w") is not kept and torch.equal(src.raw("w"), kept)  # read again from the base if asked


def test_dropping_a_mapped_tensors_pages_keeps_its_data_and_copies_get_no_dropper(tmp_path: Path) -> None:
    """page_dropper releases whole pages of a file mapping only: the tensor reads back the same from the page
    cache; a tensor that is a copy (unaligned, or in memory) has none, since dropping its pages would zero it."""
    import mmap

    from safetensors.torch import save_file

    from eagleconv.io.reader import open_checkpoint, open_state_dict
    from eagleconv.io.torch_tensors import TorchTensors

    g = torch.Generator().manual_seed(13)
    big = torch.randn(4 * mmap.PAGESIZE // 4 + 7, generator=g)  # spans whole pages
    save_file({"big": big, "small": torch.randn(3, generator=g)}, str(tmp_path / "model.safetensors"))
    store = open_checkpoint(tmp_path)
    tensors = TorchTensors(store, {n: n for n in store.tensors})
    mapped = tensors["big"]
    assert torch.equal(mapped, big)
    drop = tensors.page_dropper("big")
    assert drop is not None
    drop(0, big.numel() * 4)
    assert torch.equal(mapped, big)  # faulted back in from the file, not zeroed
    tensors.close()
    store.close()
    memory = open_state_dict({"big": big}, {})  # a state dict in memory: its tensors are the only copy
    assert TorchTensors(memory, {"big": "big"}).page_dropper("big") is None
