"""What a written drafter holds (its canonical tensors; its spec and read notes), and a float64 RMS normalisation
to check folds against."""

from __future__ import annotations

from pathlib import Path

import torch

from eagleconv.readers.loading import load_drafter

EPS = 1e-5     # the synthetic configs' rms_norm_eps


def canonical(path: Path) -> dict[str, torch.Tensor]:
    loaded = load_drafter(path)
    try:
        with loaded.torch_tensors() as t:
            return {n: t[n].clone() for n in t}
    finally:
        loaded.close()


def rms64(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x / (x.pow(2).mean(-1, keepdim=True) + EPS).sqrt()


def spec_of(path: Path):
    loaded = load_drafter(path)
    try:
        return loaded.require_spec(), loaded.read.notes
    finally:
        loaded.close()
