"""Library entry points: ``eagleconv.load(path)`` and the inputs a drafter's checkpoint implies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..spec.drafter import DrafterSpec
from ..errors import ArgumentTypeError
from ..readers.loading import load_drafter
from .inputs import Target, synthetic_inputs
from .model import DraftInputs, Drafter
from .weights import BlockCache, CheckpointSource

CACHE_FRACTION = 0.75  # of the checkpoint's bytes: keeps peak RSS well under 1.5x (benchmarks/forward.py)


def load(path: str | Path, *, dtype: str = "float32", recipe: str = "native", backend: str = "torch", seed: int = 0,
         target: str | Path | Target | None = None, allow_pickle: bool = False, layout: str | None = None,
         spec: DrafterSpec | None = None, device: str = "cpu", cache_fraction: float = CACHE_FRACTION) -> Drafter:
    """Open a drafter checkpoint for forward passes (weights memory-mapped, read lazily): ``load_drafter`` + weights.

    ``spec`` overrides the checkpoint's own description (an engine's view of it); ``target`` (a
    directory or a loaded :class:`Target`) supplies the embedding / LM head rows the drafter borrows.
    Upcast weight blocks are kept between draft steps up to ``cache_fraction`` x the checkpoint's bytes
    (0: upcast every block on every pass; the resident set then stays near one block).
    """
    ArgumentTypeError.require_path(path, "path")
    loaded = load_drafter(path, layout=layout, allow_pickle=allow_pickle)
    own = loaded.require_spec()
    loaded.store.close()  # the source maps the files itself
    tgt = Target(target) if isinstance(target, (str, Path)) else target
    embed = tgt.embed if tgt is not None and not loaded.read.tensors.get("embed_tokens.weight") else None
    lm_head = tgt.lm_head if tgt is not None and "lm_head.weight" not in loaded.read.tensors else None
    size = sum(info.nbytes for info in loaded.read.tensors.values())
    from ..support.bounds import check_memory

    # a forward touches every weight (embed_tokens aside): mapped, then read, so they must fit (a sparse file too)
    check_memory(sum(i.nbytes for n, i in loaded.read.tensors.items() if n != "embed_tokens.weight"),
                 "the drafter's weights (read by every forward pass)", path, "its safetensors")
    source = CheckpointSource(loaded)
    source.prefetch(skip={"embed_tokens.weight"})  # only the rows of the tokens used are read
    return Drafter(spec or own, source, dtype=dtype, recipe=recipe, backend=backend, seed=seed,
                   target_embed=embed, target_lm_head=lm_head, device=device, path=str(path),
                   cache=BlockCache(int(size * cache_fraction)))


def default_aux_ids(spec: DrafterSpec, target_layers: int | None = None) -> tuple[int, ...]:
    """The aux ids the checkpoint means (hidden_state_index), else vLLM's default for the target's depth."""
    ids = spec.aux.ids_as("hidden_state_index")
    if ids is not None:
        return tuple(ids)
    L = target_layers if target_layers is not None else 32
    return tuple(sorted({2, L // 2, L - 3}))[: spec.aux.count]


def inputs_for(drafter: Drafter, *, seed: int = 0, batch: int = 4, length: int = 16,
               aux_ids: tuple[int, ...] | None = None, **_: Any) -> DraftInputs:
    """Seeded synthetic inputs matching the drafter's vocabulary and aux layers."""
    spec = drafter.spec
    ids = aux_ids if aux_ids is not None else default_aux_ids(spec)
    return synthetic_inputs(spec.vocab_size, spec.target_hidden_size, ids, batch=batch, length=length, seed=seed)
