"""Drafter weights by canonical name, read lazily and upcast one matrix block at a time.

A checkpoint's safetensors files are memory-mapped (copy-on-write, so the
file is never written); a weight is converted to the compute dtype only while
its product is computed, in row blocks of at most :data:`BLOCK_BYTES`, so the
resident set stays near the checkpoint's own bytes and never holds a float32
copy of it.  After each layer the mapped pages are released from the process
(``madvise(DONTNEED)``; they stay in the page cache).

Embedding and LM head rows the drafter borrows from its target come from the
target (``--target``), or, without one, from seeded synthetic rows generated
for the token ids actually used: never a full vocabulary table.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from ..support._process import start_helper_thread
from ..errors import FindingsError

if TYPE_CHECKING:
    from pathlib import Path

    from ..readers.loading import LoadedDrafter

BLOCK_BYTES = 128 * 1024 * 1024  # compute-dtype bytes of one upcast weight block
PACK_BYTES = 4 * 1024 * 1024  # bytes of one packed weight block (Weights(pack=True)): what packing adds to the peak
# smaller weights stay on torch's matmul: their products are bound by per-call overhead, and oneDNN's is higher
# (tiny-pair, every weight under 1 MiB, ran 0.5 s slower with all of them packed)
PACK_MIN_BYTES = 1024 * 1024


class UnrunnableDrafter(FindingsError):
    """The checkpoint lacks a tensor the forward reads, or has one at another shape than its config implies.

    Raised before any arithmetic, so a structurally broken drafter is a finding about the checkpoint (exit 1,
    ``validate --forward`` reports it as EC071) instead of a KeyError or a matmul error halfway through a step.
    ``problems``: (tensor name as stored, what is wrong with it).
    """

    def __init__(self, problems: list[tuple[str, str]], path: str | None = None):
        self.problems = problems
        first = " ".join(problems[0])
        more = f" (and {len(problems) - 1} more tensor problem(s))" if len(problems) > 1 else ""
        super().__init__(f"the forward pass cannot run: {first}{more}", path)


class TensorSource(Protocol):
    """Canonical name -> tensor in its stored dtype, without copying the whole state dict."""

    def names(self) -> set[str]: ...

    def raw(self, name: str) -> torch.Tensor: ...

    def release(self) -> None: ...


@runtime_checkable
class DroppingSource(TensorSource, Protocol):
    """A source that can free what it holds for a tensor the caller now keeps its own copy of (a packed weight,
    Weights(pack=True)), or for the bytes ``byte_range`` of it."""

    def drop(self, name: str, byte_range: tuple[int, int] | None = None) -> None: ...


def stored_name(source: TensorSource, name: str) -> str:
    """The name ``source``'s checkpoint stores canonical ``name`` under, for messages (a source may say, through an
    optional ``label`` method; the findings about a checkpoint name its tensors so), else ``name``."""
    label = getattr(source, "label", None)
    return str(label(name)) if label is not None else name


class DictSource:
    """Canonical tensors already in memory (tests, a training loop's state dict)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor],
                 droppers: Mapping[str, Callable[[int, int], None]] | None = None):
        """``droppers``: for tensors that are views of a file mapping, what releases their pages (see drop)."""
        self._t = dict(tensors)
        self._droppers = dict(droppers or {})

    def names(self) -> set[str]:
        return set(self._t)

    def raw(self, name: str) -> torch.Tensor:
        return self._t[name]

    def release(self) -> None:
        pass

    def drop(self, name: str, byte_range: tuple[int, int] | None = None) -> None:
        """The caller keeps its own copy of ``name`` (or of its bytes ``byte_range``: a packed weight): free the
        pages this source holds for them, where they are a file mapping's (a copy's pages are its only data)."""
        dropper = self._droppers.get(name)
        if dropper is not None:
            dropper(*(byte_range or (0, self._t[name].numel() * self._t[name].element_size())))


class ResidentSource:
    """Another source's tensors read into memory once and kept (``release`` keeps them): for a drafter run many
    times over (simulate's rounds), where re-faulting mapped pages on every pass cost more than the arithmetic."""

    def __init__(self, base: TensorSource):
        self.base = base
        self._t: dict[str, torch.Tensor] = {}

    def names(self) -> set[str]:
        return self.base.names()

    def raw(self, name: str) -> torch.Tensor:
        t = self._t.get(name)
        if t is None:
            t = self._t[name] = self.base.raw(name).clone()
            self.base.release()
        return t

    def label(self, name: str) -> str:
        return stored_name(self.base, name)

    def release(self) -> None:
        pass

    def drop(self, name: str, byte_range: tuple[int, int] | None = None) -> None:
        """The caller keeps its own copy of ``name`` (a packed weight): forget this source's, once all of it is."""
        if byte_range is None:
            self._t.pop(name, None)


def unrunnable_dtype(name: str, dtype: str) -> str | None:
    """Why the forward cannot compute with canonical tensor ``name`` stored as ``dtype``, or None.

    A weight or bias must be a float (an integer one is EC053); any tensor needs a torch dtype to be read.
    """
    from ..io.dtypes import FLOAT_DTYPES
    from ..io.torch_tensors import torch_dtype

    if name.endswith((".weight", ".bias")) and dtype not in FLOAT_DTYPES:
        return f"is stored as {dtype}, not a float dtype (EC053): the forward does not run integers as weights"
    try:
        torch_dtype(dtype)
    except ValueError as exc:
        return f"cannot be read: {exc}"
    return None


class CheckpointSource:
    """A loaded checkpoint's tensors by canonical name, memory-mapped (io.torch_tensors), pages released on demand."""

    def __init__(self, loaded: LoadedDrafter):
        from ..io.torch_tensors import TorchTensors

        self._tensors = TorchTensors(loaded.store, loaded.read.canonical)
        self._path = str(getattr(loaded.store, "path", "") or "") or None
        self._unrunnable = {name: why for name in self._tensors
                            if (why := unrunnable_dtype(name, self._tensors.info(name).dtype))}

    def names(self) -> set[str]:
        return set(self._tensors)

    def raw(self, name: str) -> torch.Tensor:
        if name in self._unrunnable:  # every such tensor at once: the drafter is a finding (EC071), not a crash
            raise UnrunnableDrafter([(self.label(n), why) for n, why in sorted(self._unrunnable.items())], self._path)
        return self._tensors[name]

    def label(self, name: str) -> str:
        """The stored name of canonical ``name`` (``midlayer.*`` in a SpecForge checkpoint)."""
        return self._tensors._canonical.get(name, name)

    def prefetch(self, skip: Iterable[str] = ()) -> None:
        """Ask the kernel to start reading every tensor but ``skip`` into the page cache, in file order, from a
        background thread (``posix_fadvise(WILLNEED)``): the disk reads of a cold checkpoint overlap the first
        pass's arithmetic instead of stalling it one page fault at a time.  Nothing is mapped or copied here."""
        store = self._tensors._store
        locations = getattr(store, "_locations", None)
        if locations is None or not hasattr(os, "posix_fadvise"):  # in memory already, or not Linux/POSIX
            return
        skipped = set(skip)
        ranges = sorted((loc.path, loc.start, loc.end - loc.start)
                        for name, stored in self._tensors._canonical.items()
                        if name not in skipped and (loc := locations.get(stored)) is not None and loc.end > loc.start)
        if ranges:
            start_helper_thread(_willneed, ranges, name="eagleconv-prefetch")

    def release(self) -> None:
        """Drop the mapped pages from this process (they stay in the page cache): RSS stays near one layer."""
        for mm in self._tensors._maps.values():
            try:
                mm.madvise(mmap.MADV_DONTNEED)
            except (AttributeError, OSError):  # pragma: no cover - platform without madvise
                pass


def _willneed(ranges: list[tuple[Path, int, int]]) -> None:
    fds: dict[Path, int] = {}
    try:
        for path, start, length in ranges:
            if path not in fds:
                fds[path] = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fds[path], start, length, os.POSIX_FADV_WILLNEED)
    except OSError:  # only a hint: the forward reads the pages itself anyway
        pass
    finally:
        for fd in fds.values():
            os.close(fd)


def synthetic_rows(seed: int, kind: str, ids: Iterable[int], width: int, std: float = 0.02) -> torch.Tensor:
    """Seeded N(0, std) rows, one generator per (seed, kind, id): the same id always gets the same row."""
    salt = {"embed": 1, "lm_head": 2}[kind]
    rows = []
    for i in ids:
        g = torch.Generator().manual_seed((seed * 1_000_003 + salt * 7_919 + int(i) * 104_729) % (2**63 - 1))
        rows.append(torch.randn(width, generator=g, dtype=torch.float64) * std)
    return torch.stack(rows) if rows else torch.empty(0, width, dtype=torch.float64)


class BlockCache:
    """Upcast weight blocks kept between passes, up to a byte budget (first come, first kept: every pass reads
    the weights in the same order, so a static set never thrashes).  Shared by drafters over the same checkpoint."""

    def __init__(self, budget_bytes: int):
        self.budget, self.used = int(budget_bytes), 0
        self._blocks: dict[tuple[str, int, str], torch.Tensor] = {}

    def get(self, key: tuple[str, int, str]) -> torch.Tensor | None:
        return self._blocks.get(key)

    def fits(self, nbytes: int) -> bool:
        return self.used + nbytes <= self.budget

    def put(self, key: tuple[str, int, str], block: torch.Tensor) -> torch.Tensor:
        self._blocks[key] = block
        self.used += block.numel() * block.element_size()
        return block


def packing_applies(dtype: torch.dtype, device: str) -> bool:
    """Whether Weights(pack=True) packs: float32 on the CPU, a torch with a usable oneDNN, and
    ``EAGLECONV_PACKED_LINEARS`` not 0 (torch's own matmul then: ~20 MB less peak RSS on the SmolLM2 pair, and
    slower; benchmarks/RESULTS.md)."""
    from ..nn import packed_linear

    if os.environ.get("EAGLECONV_PACKED_LINEARS", "1") == "0":
        return False
    return dtype == torch.float32 and device == "cpu" and packed_linear.available()


class Weights:
    """The drafter's weights in the compute dtype, with borrowed rows resolved.

    How it multiplies is chosen here, once: upcast row blocks (into a reused buffer, or kept in ``cache`` while it
    has room), or with ``pack`` (where :func:`packing_applies`) each weight of at least PACK_MIN_BYTES that
    ``linear`` keeps reordered once into oneDNN's layout (nn.packed_linear), as vLLM's CPU backend does, the
    source's own copy dropped where the source can (:class:`DroppingSource`): for weights used over many passes
    (simulate's rounds).  ``width``: the hidden size, the width of synthetic borrowed rows.
    """

    def __init__(self, source: TensorSource, dtype: torch.dtype, *, width: int = 0, seed: int = 0,
                 target_embed: torch.Tensor | None = None, target_lm_head: torch.Tensor | None = None,
                 device: str = "cpu", cache: BlockCache | None = None, pack: bool = False):
        self.source, self.dtype, self.seed, self.device = source, dtype, seed, device
        self.width = width
        self.cache = cache
        self.target_embed, self.target_lm_head = target_embed, target_lm_head
        self._names = source.names()
        self._small: dict[str, torch.Tensor] = {}
        self.synthetic_embed_ids: set[int] = set()
        self.synthetic_lm_head = False
        self._scratch: torch.Tensor | None = None
        self._drop = source.drop if isinstance(source, DroppingSource) else None
        self.packs = pack and packing_applies(dtype, device)
        self._packed: dict[str, list[torch.Tensor]] | None = {} if self.packs else None

    @property
    def packed_weights(self) -> int:
        """How many weights ``linear`` multiplies packed so far (``pack``)."""
        return len(self._packed or {})

    def has(self, name: str) -> bool:
        return name in self._names

    def get(self, name: str) -> torch.Tensor:
        """A small tensor (norm weight, bias, d2t) in the compute dtype (integers keep theirs), cached."""
        t = self._small.get(name)
        if t is None:
            raw = self.source.raw(name)
            t = raw.to(self.device) if not raw.is_floating_point() else raw.to(device=self.device, dtype=self.dtype)
            self._small[name] = t
        return t

    def linear(self, x: torch.Tensor, name: str, bias: str | None = None, *, keep: bool = True) -> torch.Tensor:
        """x @ W.T (+ b), W read in row blocks and upcast block by block.

        Blocks of a weight used on every draft step (``keep``) go to the block cache while it has room; the
        others are upcast into one reused buffer: a fresh 128 MB block per product costs more (page faults
        and zeroing of new memory) than the conversion itself.  The products are the same either way.
        """
        if keep and self._packs(name):
            out = self._packed_linear(x, name)
            return out + self.get(bias) if bias is not None and self.has(bias) else out
        w = self.source.raw(name)
        rows = w.shape[0]
        step = max(1, BLOCK_BYTES // max(1, w.shape[1] * self.dtype.itemsize))
        copies = w.dtype != self.dtype or str(w.device) != self.device

        def block(r: int) -> torch.Tensor:
            src = w[r:r + step]
            if not copies:  # no copy, nothing to keep (an mmap view would pin its pages)
                return src
            key = (name, r, str(self.dtype))
            if keep and self.cache is not None:
                hit = self.cache.get(key)
                if hit is not None:
                    return hit
                if self.cache.fits(src.numel() * self.dtype.itemsize):
                    return self.cache.put(key, src.to(device=self.device, dtype=self.dtype))
            return self._scratch_copy(src)

        out = x @ block(0).T if step >= rows else torch.cat([x @ block(r).T for r in range(0, rows, step)], dim=-1)
        if bias is not None and self.has(bias):
            out = out + self.get(bias)
        self.source.release()  # the weight's pages leave this process: RSS stays near one upcast block
        return out

    def _packs(self, name: str) -> bool:
        """Whether ``linear`` multiplies ``name`` packed: packing is on and it is packed already (its source copy may
        be gone), or it has PACK_MIN_BYTES or more."""
        if self._packed is None:
            return False
        return name in self._packed or self.source.raw(name).numel() * self.dtype.itemsize >= PACK_MIN_BYTES

    def _packed_linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """x @ W.T with W packed at its first use, in row blocks of at most PACK_BYTES: each block's source pages
        are dropped once it is packed, so packing adds one block to the peak, not a whole lm_head."""
        from ..nn import packed_linear

        assert self._packed is not None
        blocks = self._packed.get(name)
        if blocks is None:
            w = self.source.raw(name)
            row_bytes = w.shape[1] * w.element_size()
            step = max(1, PACK_BYTES // max(1, w.shape[1] * self.dtype.itemsize))
            drop = self._drop
            blocks = []
            for r in range(0, w.shape[0], step):
                blocks.append(packed_linear.pack(w[r:r + step].to(self.dtype)))
                if drop is not None:
                    drop(name, (r * row_bytes, (r + step) * row_bytes))
            if drop is not None:
                drop(name)
            self._packed[name] = blocks
            self.source.release()
        x = x.to(self.dtype)
        if len(blocks) == 1:
            return packed_linear.linear(x, blocks[0])
        return torch.cat([packed_linear.linear(x, b) for b in blocks], dim=-1)

    def _scratch_copy(self, src: torch.Tensor) -> torch.Tensor:
        """``src`` converted into the reused block buffer (a contiguous view at its start, as a fresh block is)."""
        n = src.numel()
        if self._scratch is None or self._scratch.numel() < n:
            self._scratch = torch.empty(max(n, BLOCK_BYTES // self.dtype.itemsize), dtype=self.dtype,
                                        device=self.device)
        return self._scratch[:n].view(src.shape).copy_(src)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Embedding rows for target-vocabulary ``ids`` (any shape)."""
        flat = ids.reshape(-1)
        if self.has("embed_tokens.weight"):
            table = self.source.raw("embed_tokens.weight")
            rows = table.index_select(0, flat.to(table.device))
            drop = self._drop
            if self._packed is not None and drop is not None:
                # the rows are copied: the pages they faulted in (the kernel maps ~64 KB around each) can go
                drop("embed_tokens.weight", (0, table.numel() * table.element_size()))
        elif self.target_embed is not None:
            rows = self.target_embed.index_select(0, flat.to(self.target_embed.device))  # cuda with --device cuda
        else:
            self.synthetic_embed_ids.update(int(i) for i in flat.tolist())
            rows = synthetic_rows(self.seed, "embed", flat.tolist(), self.width)
        return rows.to(device=self.device, dtype=self.dtype).reshape(*ids.shape, -1)

    def lm_head(self, x: torch.Tensor, draft_vocab: int, target_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., Vd]."""
        if self.has("lm_head.weight"):
            return self.linear(x, "lm_head.weight")[..., :draft_vocab]
        if self.target_lm_head is not None:
            return x @ self.target_lm_head.index_select(0, target_ids.cpu()).to(device=self.device, dtype=self.dtype).T
        self.synthetic_lm_head = True
        step = max(1, BLOCK_BYTES // max(1, self.width * 8))
        ids = target_ids.tolist()
        return torch.cat([x @ synthetic_rows(self.seed, "lm_head", ids[r:r + step], self.width)
                          .to(device=self.device, dtype=self.dtype).T for r in range(0, len(ids), step)], dim=-1)

    def release(self) -> None:
        self.source.release()
