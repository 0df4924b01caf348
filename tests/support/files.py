"""Edit a stored tensor in place, and list the staging debris a write may leave beside its destination."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file, save_file


def poke(directory: Path, name: str, index: tuple[int, ...], value: float) -> None:
    """Set one element of a stored tensor (test setup only)."""
    path = directory / "model.safetensors"
    tensors = load_file(path)
    tensors[name][index] = value
    save_file(tensors, path, metadata={"format": "pt"})


def debris(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".eagleconv-" in p.name)
