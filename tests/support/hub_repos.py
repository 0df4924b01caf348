"""What the loopback Hub holds for the header-only ``hf://`` and ``audit`` tests: every fixture, hostile variants,
published configs with synthetic headers, and sparse multi-GB drafters (tests/support/fake_hub.Sparse)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from tests.support.fake_hub import Blob, FakeHub, Sparse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def fixture_checkpoints() -> dict[str, Path]:
    """Every checkpoint under fixtures/ (a directory with a config.json), by a repository name made of its path."""
    found = sorted(p.parent for p in FIXTURES.rglob("config.json"))
    return {"fixtures/" + "-".join(d.relative_to(FIXTURES).parts): d for d in found}


def directory_files(directory: Path) -> dict[str, Blob]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def publish(hub: FakeHub, repo_id: str, directory: Path, **options: bool) -> str:
    """``directory``'s files as ``repo_id``'s next commit; its sha."""
    return hub.add(repo_id, directory_files(directory), **options)


def header_bytes(header: object, pad: bool = True) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def sparse_safetensors(tensors: dict[str, tuple[str, list[int]]], itemsize: dict[str, int] | None = None) -> Sparse:
    """A safetensors file whose header lists ``tensors`` (name -> dtype, shape) and whose data is all zeros."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1, **(itemsize or {})}
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    head = header_bytes(header)
    return Sparse(head, len(head) + offset)
