"""``hf://ORG/NAME[@REV]`` read from its headers: config.json, the index and each safetensors header, by range.

A 5 GB drafter is judged from a few KB: the repository's info pins the
commit (every later read names it, so a push in between changes nothing), then
config.json and the index are read whole (capped as local JSON is) and each
safetensors file's header by one range request (two when it is longer than
the first probe).  The header bytes go through the same strict pre-parser as a
local file's (``io.safetensors_header``), with the file size the server
states: a remote header is hostile input like any other.  The checks on the
index are local checkpoints' own (``io.reader``), so both refuse the same files.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..support.bounds import check_config
from ..errors import FormatError, UnsafeInputError
from ..io.hub_paths import HubRef, check_repo_id, check_revision, is_hf_url, parse_hf_url
from ..io.pickle_reader import WEIGHT_PICKLE, weight_pickles
from ..io.reader import (
    PICKLE_INDEX,
    SAFETENSORS_INDEX,
    Duplicates,
    check_weight_map,
    weight_map_of,
)
from ..io.remote import RemoteCheckpoint
from ..io.safetensors_header import header_length, parse_header_bytes
from ..io.tensor_store import TensorInfo
from ..support.jsonio import loads_strict
from ..spec.report import HubSource
from .base import offline
from .ranges import RangeReader

PROBE_BYTES = 16 * 1024  # the first range of each safetensors file: a drafter's header is a few KB
MAX_SIBLINGS = 100_000
_COMMIT = re.compile(r"[0-9a-f]{40}")


class NoDrafterFiles(FormatError):
    """The repository holds no config.json or no weights: not a drafter checkpoint (audit's ``not-eagle`` row)."""


class PickleWeights(UnsafeInputError):
    """The weights are pickles: a header-only read cannot list them (audit's ``pickle`` row)."""


def repo_info(reader: RangeReader, ref: HubRef) -> tuple[str, list[str], Any]:
    """(commit, top-level file names, the gated field) of ``ref`` from the Hub's model info."""
    url = reader.info_url(ref.repo_id, ref.revision)
    info = reader.read_json(url)
    sha = info.get("sha") if isinstance(info, dict) else None
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not _COMMIT.fullmatch(sha) or not isinstance(siblings, list) \
            or len(siblings) > MAX_SIBLINGS:
        raise UnsafeInputError("the Hub's model info names no commit sha and file list", url)
    names = [s.get("rfilename") for s in siblings if isinstance(s, dict)]
    return sha, sorted(n for n in names if isinstance(n, str) and n and "/" not in n), info.get("gated")


def _read_header(reader: RangeReader, url: str, shown: str) -> tuple[Any, int]:
    head, size = reader.read_range(url, 0, PROBE_BYTES)
    n = header_length(shown, head[:8], size)
    if 8 + n > len(head):
        rest, size_again = reader.read_range(url, len(head), 8 + n - len(head))
        if size_again != size:
            raise UnsafeInputError(f"the file's size changed between two reads ({size} then {size_again})", shown)
        head += rest
    return parse_header_bytes(shown, head[:8], head[8:8 + n], size), size


def open_remote(ref: HubRef, reader: RangeReader, duplicates: Duplicates | None = None, *,
                config_only: bool = False) -> RemoteCheckpoint:
    """The checkpoint at ``ref``, from its config, index and headers, every file read at one commit.

    ``config_only`` (lint): config.json alone, no weights listed.
    """
    check_repo_id(ref.repo_id)
    if ref.revision is not None:
        check_revision(ref.revision)
    commit, listing, _ = repo_info(reader, ref)
    label = f"hf://{ref.repo_id}@{commit}"

    def url(name: str) -> str:
        return reader.file_url(ref.repo_id, name, commit)

    def json_file(name: str) -> Any:
        keys: list[str] = []
        value = loads_strict(reader.read_small(url(name)), f"{label}/{name}",
                             duplicates=keys if duplicates is not None else None)
        if duplicates is not None:
            duplicates.extend((Path(name), key) for key in keys)
        return value

    if "config.json" not in listing:
        raise NoDrafterFiles("no config.json: not a drafter checkpoint", label)
    config = json_file("config.json")
    if not isinstance(config, dict):
        raise FormatError("config.json is not a JSON object", f"{label}/config.json")
    check_config(config, f"{label}/config.json")
    notes: list[str] = []
    if config_only:
        return RemoteCheckpoint(label, config, "config", [], {}, {}, {}, notes, lambda *_: b"")
    if SAFETENSORS_INDEX in listing:
        weight_map = weight_map_of(json_file(SAFETENSORS_INDEX), f"{label}/{SAFETENSORS_INDEX}", ".safetensors")
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if s not in listing]
        if missing:
            raise UnsafeInputError(f"the index names shards the repository does not hold: {', '.join(missing[:5])}",
                                   f"{label}/{SAFETENSORS_INDEX}")
        kind, files = "safetensors-sharded", shards
    else:
        files = [n for n in listing if n.endswith(".safetensors")]
        if len(files) > 1:
            raise UnsafeInputError(f"{len(files)} .safetensors files but no {SAFETENSORS_INDEX}", label)
        kind, weight_map = "safetensors", None
    if not files:
        indexed = sorted(set(weight_map_of(json_file(PICKLE_INDEX), f"{label}/{PICKLE_INDEX}", ".bin").values())) \
            if PICKLE_INDEX in listing else None
        pickles, _ = weight_pickles(listing, indexed)
        if pickles:
            raise PickleWeights(f"weights are pickles ({', '.join(pickles)}): a header-only read cannot list "
                                   "their tensors, and loading a pickle can execute code; --download "
                                   "--allow-pickle loads them with torch.load(weights_only=True)", label)
        raise NoDrafterFiles(f"no weights found (.safetensors, or {WEIGHT_PICKLE} / {PICKLE_INDEX} with --download "
                          "--allow-pickle)", label)
    tensors: dict[str, TensorInfo] = {}
    spans: dict[str, tuple[str, int, int]] = {}
    metadata: dict[str, str] = {}
    for name in files:
        header, _ = _read_header(reader, url(name), f"{label}/{name}")
        for key, value in header.metadata.items():
            metadata.setdefault(key, value)
        for entry in header.entries.values():
            if entry.name in tensors:
                raise UnsafeInputError(f"tensor {entry.name!r} is stored in two shards ({tensors[entry.name].file} "
                                       f"and {name})", f"{label}/{name}")
            tensors[entry.name] = TensorInfo(entry.name, entry.dtype, entry.shape, name)
            spans[entry.name] = (name, entry.start, entry.end)
    if weight_map is not None:
        notes += check_weight_map(weight_map, tensors, listing, f"{label}/{SAFETENSORS_INDEX}")
    else:
        pickles = [n for n in listing if n.endswith((".bin", ".pt", ".pth"))]
        if pickles:
            notes.append(f"ignored pickle files beside safetensors: {', '.join(pickles)}")

    def fetch(file: str, start: int, length: int) -> bytes:
        return reader.read_range(url(file), start, length)[0]

    files = [SAFETENSORS_INDEX, *files] if weight_map is not None else files
    return RemoteCheckpoint(label, config, kind, files, tensors, spans, metadata, notes, fetch)


def hub_source(ref: HubRef, store: RemoteCheckpoint, reader: RangeReader) -> HubSource:
    """What the report states about the read: the commit and the bytes transferred so far."""
    return HubSource(repo_id=ref.repo_id, revision=ref.revision, commit=store.label.rpartition("@")[2],
                     bytes_transferred=reader.bytes_read, requests=reader.requests)


def open_hf_headers(path: str, duplicates: Duplicates | None = None, *, config_only: bool = False,
                    endpoint: str | None = None, token: str | bool | None = None,
                    timeout: float | None = None) -> tuple[RemoteCheckpoint, Callable[[], HubSource]]:
    """``hf://ORG/NAME[@REV]`` -> its header-only checkpoint, and a function saying what the read cost so far."""
    ref = parse_hf_url(path)
    reader = RangeReader(endpoint, token, timeout)
    store = open_remote(ref, reader, duplicates, config_only=config_only)
    return store, lambda: hub_source(ref, store, reader)


def reads_headers(path: object, download: bool = False) -> bool:
    """Whether ``path`` is read from its headers: ``hf://`` without ``download``, unless huggingface_hub is
    offline (HF_HUB_OFFLINE: then the cached snapshot answers, as ``download`` reads it)."""
    return is_hf_url(path) and not download and not offline()
