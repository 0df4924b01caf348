"""Rotary position embeddings as vLLM computes them for a drafter (torch; the config spellings are the package's).

The cos/sin cache is computed in float32 and cast to the compute dtype; the
rotation runs in the compute dtype.  Llama/Qwen3 rotate halves (neox); MLA
rotates interleaved pairs (GPT-J) with DeepSeek's yarn variant, whose mscale
also enters the softmax scale (vLLM: model_executor/models/deepseek_v2.py, yarn_get_mscale).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch


class TypedRope(Protocol):
    """What :func:`resolve_rope` reads of a typed RoPE (:class:`eagleconv.spec.drafter.Rope`); its scaling
    parameters (``factor``, ``beta_fast``, ...) are read by name, each a number or None."""

    @property
    def theta(self) -> float | None: ...
    @property
    def scaling(self) -> str: ...
    @property
    def interleaved(self) -> bool: ...


@dataclass(frozen=True)
class ResolvedRope:
    """A drafter's typed RoPE (:class:`eagleconv.spec.drafter.Rope`) as the engine runs it: theta, scaling type, parameters."""

    theta: float
    kind: str = "default"  # default | linear | llama3 | yarn | deepseek_yarn
    params: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def resolve_rope(typed: TypedRope, architecture: str, default_theta: float) -> ResolvedRope:
    """The spec's typed RoPE (``DrafterSpec.rope``) as vLLM will run it; an absent theta gets vLLM's default
    for the architecture (``Architecture.default_rope_theta``)."""
    notes: list[str] = []
    theta = typed.theta
    if theta is None:
        theta = default_theta
        notes.append(f"rope_theta absent: vLLM's {architecture} default {theta:g}")
    kind = {"none": "default"}.get(typed.scaling, typed.scaling)
    if typed.interleaved and kind != "default":
        kind = "deepseek_yarn"  # vLLM rewrites every non-default MLA rope type (deepseek_v2.py)
    if kind not in ("default", "linear", "llama3", "yarn", "deepseek_yarn"):
        raise ValueError(f"rope scaling {kind!r} is not implemented by the reference forward")
    keys = ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast",
            "beta_slow", "mscale", "mscale_all_dim", "attn_factor", "extrapolation_factor")
    params = {k: getattr(typed, k) for k in keys if getattr(typed, k) is not None}
    return ResolvedRope(float(theta), kind, params, tuple(notes))


def yarn_get_mscale(scale: float = 1.0, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(num_rotations: float, dim: int, base: float, max_pos: int) -> float:
    return (dim * math.log(max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def _yarn_inv_freq(rope: ResolvedRope, rot: int, dtype: torch.dtype) -> torch.Tensor:
    p = rope.params
    factor = float(p["factor"])
    orig = int(p.get("original_max_position_embeddings", 4096))
    beta_fast, beta_slow = float(p.get("beta_fast", 32)), float(p.get("beta_slow", 1))
    extrapolation = float(p.get("extrapolation_factor", 1.0))
    pos_freqs = rope.theta ** (torch.arange(0, rot, 2, dtype=dtype) / rot)
    inv_extra, inv_inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    low = max(math.floor(_yarn_correction_dim(beta_fast, rot, rope.theta, orig)), 0)
    high: float = min(math.ceil(_yarn_correction_dim(beta_slow, rot, rope.theta, orig)), rot - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(rot // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
    mask = (1 - ramp) * extrapolation
    return inv_inter * (1 - mask) + inv_extra * mask


def inv_freq(rope: ResolvedRope, rot: int, dtype: torch.dtype = torch.float) -> torch.Tensor:
    """Per-pair inverse frequencies [rot/2] (float32 as vLLM; float64 for a float64 reference)."""
    base = 1.0 / (rope.theta ** (torch.arange(0, rot, 2, dtype=dtype) / rot))
    p = rope.params
    if rope.kind == "linear":
        return base / float(p["factor"])
    if rope.kind == "llama3":
        factor, low_ff, high_ff = float(p["factor"]), float(p["low_freq_factor"]), float(p["high_freq_factor"])
        orig = float(p["original_max_position_embeddings"])
        low_wl, high_wl = orig / low_ff, orig / high_ff
        wave_len = 2 * math.pi / base
        smooth = (orig / wave_len - low_ff) / (high_ff - low_ff) if low_ff != high_ff else torch.zeros_like(base)
        return torch.where(wave_len < high_wl, base,
                           torch.where(wave_len > low_wl, base / factor, (1 - smooth) * base / factor + smooth * base))
    if rope.kind in ("yarn", "deepseek_yarn"):
        return _yarn_inv_freq(rope, rot, dtype)
    return base


def cos_sin(rope: ResolvedRope, rot: int, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [n, rot/2] for integer ``positions``: float32 cache, cast to ``dtype``."""
    cache = torch.float64 if dtype == torch.float64 else torch.float32
    freqs = positions.to(cache).unsqueeze(-1) * inv_freq(rope, rot, cache).to(positions.device).unsqueeze(0)
    scale = 1.0
    p = rope.params
    if rope.kind == "yarn":
        scale = yarn_get_mscale(float(p["factor"])) * float(p.get("attn_factor", 1.0))
    elif rope.kind == "deepseek_yarn":
        f = float(p["factor"])
        scale = (yarn_get_mscale(f, float(p.get("mscale", 1.0))) / yarn_get_mscale(f, float(p.get("mscale_all_dim", 0.0)))
                 * float(p.get("attn_factor", 1.0)))
    return (freqs.cos() * scale).to(dtype), (freqs.sin() * scale).to(dtype)


def softmax_scale_factor(rope: ResolvedRope) -> float:
    """DeepSeek yarn multiplies the softmax scale by mscale(factor, mscale_all_dim)^2."""
    if rope.kind != "deepseek_yarn":
        return 1.0
    m = yarn_get_mscale(float(rope.params["factor"]), float(rope.params.get("mscale_all_dim", 0.0)))
    return m * m


def rotate_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., n, d] with cos/sin [n, d/2]: rotate the two halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., n, d] with cos/sin [n, d/2]: rotate (even, odd) pairs (GPT-J style)."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
