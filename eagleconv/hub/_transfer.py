"""The checkpoint's files, and copying or hashing them with byte progress (push stages, pull places)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..gguf.gguf_file import open_if_gguf
from ..io.reader import open_checkpoint
from ..io.durable import fsync_file
from ._base import CARD, DOWNLOADING, MANIFEST, Progress, Step


def _takes(function: Callable[..., object], parameter: str) -> bool:
    """Whether ``function`` accepts ``parameter`` (huggingface_hub grew keywords between 0.30 and 1.x)."""
    import inspect

    return parameter in inspect.signature(function).parameters


def _quiet_tqdm(progress: Step | None) -> Any:
    """A tqdm class for snapshot_download that draws nothing and reports its bytes bar to ``progress``.

    snapshot_download makes three: files fetched, bytes received, and bytes written to the cache
    ("Reconstructing ...", the total growing as each file starts); the last one is DOWNLOADING.  The bars
    run as usual (huggingface_hub reads their counts and rates) but write into a sink.
    """
    import io

    from tqdm.auto import tqdm  # type: ignore[import-untyped]

    class Sink(io.TextIOBase):
        def write(self, text: str) -> int:
            return len(text)

    class Quiet(tqdm):
        def __init__(self, *args: Any, **kwargs: Any):
            self.reports = progress is not None and str(kwargs.get("desc", "")).startswith("Reconstructing")
            super().__init__(*args, **{**kwargs, "file": Sink(), "disable": False, "ncols": 80})

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.reports and progress is not None:
                done = int(self.n)
                progress(DOWNLOADING, done, max(int(self.total or 0), done))
            return shown

    return Quiet


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
