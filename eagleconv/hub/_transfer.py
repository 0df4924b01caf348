"""The checkpoint's files, and copying or hashing them with byte progress (push stages, pull places)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from ..gguf.gguf_file import open_if_gguf
from ..io.reader import open_checkpoint
from ..io.durable import fsync_file
from ..hubread.base import CARD, MANIFEST, Step
from ._base import Progress


def _takes(function: Callable[..., object], parameter: str) -> bool:
    """Whether ``function`` accepts ``parameter`` (huggingface_hub grew keywords between 0.30 and 1.x)."""
    import inspect

    return parameter in inspect.signature(function).parameters


def _bytes_step(progress: Step | None, what: str) -> Progress:
    """The (on_total, on_bytes) pair that validate() and build_manifest() take, reporting to ``progress`` as ``what``."""
    if progress is None:
        return None, None
    state = {"total": 0, "done": 0}

    def on_total(total: int) -> None:
        state.update(total=total, done=0)
        progress(what, 0, total)

    def on_bytes(n: int) -> None:
        state["done"] += n
        progress(what, min(state["done"], state["total"]), state["total"])

    return on_total, on_bytes


def _copy_files(source: Path, target: Path, names: Sequence[str], progress: Step | None, what: str,
                durable: bool = False) -> None:
    """Copy ``names`` from ``source`` into ``target`` (subdirectories made), reporting bytes after each file."""
    sizes = {name: (source / name).stat().st_size for name in names}
    total, done = sum(sizes.values()), 0
    if progress:
        progress(what, 0, total)
    for name in names:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target / name)  # follows the cache's blob symlinks
        if durable:
            fsync_file(target / name)
        done += sizes[name]
        if progress:
            progress(what, done, total)


def checkpoint_files(source: Path) -> tuple[list[str], list[str]]:
    """(files that make up the checkpoint, other files in the directory): only the former are published."""
    store = open_checkpoint(source, open_file=open_if_gguf)
    try:
        names = sorted({"config.json", *store.files})
    finally:
        store.close()
    others = sorted(p.name for p in source.iterdir() if p.name not in names and p.name not in (CARD, MANIFEST))
    return names, others
