"""Atomic, streaming checkpoint writer.

Everything is written into a staging directory beside the destination
(``.NAME.eagleconv-HOST-PID-START-RAND.partial``, a
:class:`~eagleconv.io.staging.StagedDirectory`): shards first, each fsynced,
then config and the index last; then the staging directory is fsynced and
renamed into place and the parent directory fsynced.  On any failure the
staging directory (and any parent directory created for it) is removed, so a
destination is either complete or absent, and an I/O error is one line naming
the destination.  Tensor bytes are
copied by the kernel from the source file (see ``copy_range``), so peak memory
does not grow with checkpoint size.  ``durable=False`` (``--no-fsync``) skips
the fsyncs but keeps the staging and the rename.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..support._process import start_helper_thread, termination_signals_blocked
from ..errors import UsageError
from ..support.jsonio import dump_json
from .dtypes import DTYPE_SIZES
from .finite import SCANNED_DTYPES, ValueScan, scan_file_range
from .paths import resolve_path
from .reader import SAFETENSORS_INDEX, Checkpoint
from .safetensors_header import build_header
from .durable import fsync_file, write_all, write_new_file
from .replaceable import Recognise
from .staging import StagedDirectory

SINGLE_FILE = "model.safetensors"


@dataclass(frozen=True)
class OutputTensor:
    """One tensor to write: its name, header fields, and how to produce its bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    write: Callable[[int], None]  # appends exactly ``nbytes`` bytes to the given fd
    data: bytes | None = None  # those bytes, where they are held in memory (computed and derived tensors)


def check_not_overlapping(sources: Sequence[str | Path], destination: str | Path) -> None:
    """Refuse a destination equal to, inside, or containing any source (after resolving symlinks)."""
    dst = resolve_path(destination)
    for source in sources:
        src = resolve_path(source)
        if dst == src:
            raise UsageError(f"destination is the source {src}; eagleconv never writes where it reads", destination)
        if dst.is_relative_to(src):
            raise UsageError(f"destination is inside the source {src}; eagleconv never writes where it reads", destination)
        if src.is_relative_to(dst):
            raise UsageError(f"destination contains the source {src}; refusing to write over it", destination)


def shard_tensors(tensors: Sequence[OutputTensor], max_shard_size: int | None) -> list[list[OutputTensor]]:
    """Order tensors as safetensors does (widest dtype first, then name) and split into shards."""
    ordered = sorted(tensors, key=lambda t: (-DTYPE_SIZES[t.dtype], t.name))
    if not max_shard_size:
        return [ordered]
    shards: list[list[OutputTensor]] = [[]]
    size = 0
    for tensor in ordered:
        if shards[-1] and size + tensor.nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(tensor)
        size += tensor.nbytes
    return shards


WRITEBACK_MIN_BYTES = 32 * 1024 * 1024
# How writeback of each just-copied large tensor is started.  Measured (benchmarks/RESULTS.md,
# "Writeback"): posix_fadvise(DONTNEED) or sync_file_range(WRITE) called in line block 0.1-0.3 s per
# tensor while the block queue fills, so the disk never writes while the next tensor is copied, and
# DONTNEED also evicts pages the NaN/Inf check is about to read; leaving it all to the closing fsync
# writes nothing until the copy ends.  The default hands sync_file_range(WRITE) to a helper thread:
# the copy and the check go on while the kernel queues the writes, and the final fsync waits only
# for the tail.  EAGLECONV_WRITEBACK=fadvise|sfr|none selects the others (for the benchmark only).
WRITEBACK = os.environ.get("EAGLECONV_WRITEBACK", "thread")


def _sync_file_range() -> Callable[[int, int, int], None] | None:
    """libc's sync_file_range(fd, offset, n, SYNC_FILE_RANGE_WRITE), or None where there is none."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int

    def start(fd: int, offset: int, length: int) -> None:
        fn(fd, offset, length, 2)  # SYNC_FILE_RANGE_WRITE; a hint, errors ignored
    return start


class _Writeback:
    """Starts writeback of each large tensor as soon as it is copied, so the disk works during the copy."""

    def __init__(self, how: str):
        self.how = how
        self.sfr = _sync_file_range() if how in ("sfr", "thread") else None
        self.queue: Any = None
        self.thread: Any = None
        if self.sfr is None and how in ("sfr", "thread"):
            self.how = "fadvise"  # no sync_file_range (not Linux): the portable hint, in line
        if self.how == "thread":
            import queue

            self.queue = queue.SimpleQueue()
            self.thread = start_helper_thread(self._run, name="eagleconv-writeback")

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            fd, offset, length, done = item
            if fd is not None and self.sfr is not None:
                self.sfr(fd, offset, length)
            if done is not None:
                done.set()

    def start(self, fd: int, offset: int, length: int) -> None:
        if self.how == "fadvise":
            _start_writeback(fd, offset, length)
        elif self.how == "sfr" and self.sfr is not None:
            self.sfr(fd, offset, length)
        elif self.how == "thread":
            self.queue.put((fd, offset, length, None))

    def drain(self) -> None:
        """Wait until every queued range was handed to the kernel (before its fd is closed)."""
        if self.how == "thread":
            import threading

            done = threading.Event()
            self.queue.put((None, 0, 0, done))
            done.wait()

    def close(self) -> None:
        if self.how == "thread":
            self.queue.put(None)
            self.thread.join()


def _prefetch_numpy() -> None:
    """Import numpy (for the value check) on a thread while the first tensor is copied.

    Cold, its shared libraries take ~0.8 s to read from disk on the benchmark VM
    (0.09 s warm); the import releases the GIL while it reads, and so does the
    copy, so the two overlap.  The check's own import then finds it done or waits.
    """
    import sys

    if "numpy" not in sys.modules:
        start_helper_thread(__import__, "numpy", name="eagleconv-import")


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a just-copied range to disk now, without waiting.

    Otherwise the dirty pages sit in memory until the closing fsync, which then
    waits for the whole file; starting writeback per large tensor overlaps the
    disk writes with the rest of the copy.  On Linux POSIX_FADV_DONTNEED starts
    asynchronous writeback of dirty pages in the range (mm/fadvise.c) and frees
    only pages that are already clean.  A hint: durability still comes from fsync.
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


def write_state_dict(store: Checkpoint, destination: str | Path, *, durable: bool = True) -> list[str]:
    """Write an in-memory checkpoint (:func:`~eagleconv.io.reader.open_state_dict`) as a checkpoint directory.

    Its tensors under their own names and its config as config.json, through the staged writer every output
    uses; for ``push``, which publishes files.  A config value JSON cannot hold (a ``torch.dtype``, NaN)
    is refused naming ``config`` before anything is written.
    """
    from ..errors import ArgumentTypeError
    from ..support.jsonio import loads_strict

    try:
        text = dump_json(store.config)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"config: {exc}; a config.json holds JSON values only") from exc
    loads_strict(text, "config")  # what every reader of config.json will parse, or the field that it cannot
    tensors = [OutputTensor(name, info.dtype, info.shape, info.nbytes, functools.partial(store.copy_into, name))
               for name, info in store.tensors.items()]
    return CheckpointWriter(destination, durable=durable).write(
        tensors, {"config.json": text}, metadata={"format": "pt"})  # what transformers' save_pretrained writes


class CheckpointWriter:
    """Writes one checkpoint directory atomically.  Use as a context manager or call ``write``."""

    def __init__(self, destination: str | Path, sources: Sequence[str | Path] = (), overwrite: bool = False,
                 durable: bool = True, recognise: Recognise | None = None):
        """``durable=False`` skips every fsync (and the early-writeback hints): the
        destination is still published atomically by rename, but a power loss soon
        after may leave it incomplete.  For scratch space, like ``cp``.  ``overwrite`` needs ``recognise``
        (:class:`~eagleconv.io.staging.StagedDirectory`)."""
        self.destination = Path(destination)
        self.durable = durable
        check_not_overlapping(sources, self.destination)
        # Cleans what killed runs left in the parent, and refuses an existing destination --overwrite may not replace.
        self._staged = StagedDirectory(self.destination, overwrite=overwrite, recognise=recognise, durable=durable)
        self.notes: list[str] = self._staged.notes
        self.overwrite = overwrite

    def write(
        self,
        tensors: Sequence[OutputTensor],
        files: dict[str, str | bytes],
        *,
        max_shard_size: int | None = None,
        metadata: dict[str, str] | None = None,
        on_bytes: Callable[[int], None] | None = None,
        verify: Callable[[Path], None] | None = None,
        check_values: Callable[[OutputTensor, ValueScan], None] | None = None,
    ) -> list[str]:
        """Write shards and ``files`` (config.json...) and publish the directory.

        Returns the written file names.  ``on_bytes`` is called after each
        tensor with its size, for progress bars.  ``verify`` is called on the
        complete staging directory before it is published; raising there
        publishes nothing.  ``check_values`` is called with each float tensor's
        NaN/Inf scan, read back from the staged file while it is still in the page
        cache; raising there stops the write and publishes nothing.
        """
        written: list[str] = []
        self._staged.size = sum(t.nbytes for t in tensors) + sum(len(c) for c in files.values())
        with self._staged as staging:
            shards = shard_tensors(tensors, max_shard_size)
            names = (
                [SINGLE_FILE]
                if len(shards) == 1
                else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
            )
            weight_map: dict[str, str] = {}
            if check_values is not None:
                _prefetch_numpy()
            writeback = _Writeback(WRITEBACK if self.durable else "off")
            try:
                for shard_name, shard in zip(names, shards, strict=True):
                    self._write_shard(staging / shard_name, shard, metadata, on_bytes, writeback, check_values)
                    weight_map.update({t.name: shard_name for t in shard})
                    written.append(shard_name)
            finally:
                writeback.close()
            # Durability: every shard is fsynced before config, index and rename.  The
            # fsyncs come after *all* shards are written rather than one per shard, so
            # copying shard i+1 is not serialised behind the disk flushing shard i.
            if self.durable:
                for shard_name in names:
                    fsync_file(staging / shard_name)
            for name, content in files.items():
                write_new_file(staging / name, [content.encode() if isinstance(content, str) else content], durable=self.durable)
                written.append(name)
            if len(shards) > 1:  # the index goes last: its presence means the shards are complete
                total = sum(t.nbytes for t in tensors)
                index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
                write_new_file(staging / SAFETENSORS_INDEX, [dump_json(index).encode()], durable=self.durable)
                written.append(SAFETENSORS_INDEX)
            if verify is not None:
                verify(staging)  # the staging directory is fsynced and published when the block ends
        return written

    @staticmethod
    def _write_shard(path: Path, shard: Sequence[OutputTensor], metadata: dict[str, str] | None,
                     on_bytes: Callable[[int], None] | None, writeback: _Writeback,
                     check_values: Callable[[OutputTensor, ValueScan], None] | None) -> None:
        prefix, _ = build_header([(t.name, t.dtype, t.shape, t.nbytes) for t in shard], metadata)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)  # read too: the value check reads it back
        # The value check of tensor i runs on a helper thread while tensor i+1 is copied: the copy
        # waits on the disk (cold) and the check on the CPU, so they overlap (pread and numpy release
        # the GIL).  Results are handed to check_values in tensor order, in this thread.
        scanner = _Scanner(fd, check_values) if check_values is not None else None
        try:
            os.write(fd, prefix)
            write_tensors(fd, shard, len(prefix), writeback, scanner, on_bytes, shown=path.name)
        finally:
            if scanner is not None:
                scanner.close()  # no scan may outlive the fd
            writeback.drain()
            os.close(fd)



def write_tensors(fd: int, tensors: Sequence[OutputTensor], position: int, writeback: _Writeback,
                  scanner: _Scanner | None, on_bytes: Callable[[int], None] | None, *, alignment: int = 1,
                  shown: str) -> int:
    """Append each tensor's bytes to ``fd`` from ``position`` (zero-padded to ``alignment``, as GGUF aligns its
    data), its NaN/Inf scan submitted and its writeback started as it lands; returns the end, checked against the
    file's size.  One loop for the safetensors shards and the GGUF file alike."""
    for tensor in tensors:
        pad = -position % alignment
        if pad:
            write_all(fd, b"\0" * pad)
            position += pad
        tensor.write(fd)
        if scanner is not None and tensor.dtype in SCANNED_DTYPES and tensor.nbytes:
            scanner.submit(tensor, position)
        if tensor.nbytes >= WRITEBACK_MIN_BYTES:
            writeback.start(fd, position, tensor.nbytes)
        if scanner is not None:
            scanner.report(wait=False)
        position += tensor.nbytes
        if on_bytes:
            on_bytes(tensor.nbytes)
    if scanner is not None:
        scanner.report(wait=True)
    actual = os.fstat(fd).st_size
    if actual != position:
        raise RuntimeError(f"internal error: wrote {actual} bytes to {shown}, expected {position}")
    return position


class _Scanner:
    """Runs scan_file_range for one shard's tensors on a helper thread, reporting results in order."""

    def __init__(self, fd: int, check_values: Callable[[OutputTensor, ValueScan], None]):
        from concurrent.futures import ThreadPoolExecutor

        self.fd = fd
        self.check_values = check_values
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eagleconv-check")
        self.pending: list[tuple[OutputTensor, Any]] = []

    def submit(self, tensor: OutputTensor, offset: int) -> None:
        with termination_signals_blocked():  # the pool starts its thread in submit; it inherits the mask
            future = self.pool.submit(scan_file_range, self.fd, offset, tensor.nbytes, tensor.dtype)
        self.pending.append((tensor, future))

    def report(self, wait: bool) -> None:
        while self.pending and (wait or self.pending[0][1].done()):
            tensor, future = self.pending.pop(0)
            found = future.result()
            if found is not None:
                self.check_values(tensor, found)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
