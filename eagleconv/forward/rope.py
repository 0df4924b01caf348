"""``resolve_rope(typed, architecture)`` for forward/native_target.py, the one caller still importing it from here.

RoPE is :mod:`eagleconv.rope` (config spellings) and :mod:`eagleconv.rope.rotary` (the math); delete this
module once native_target.py calls :func:`eagleconv.forward.model.rope_of` or the rotary module (issue 16).
"""

from __future__ import annotations

from typing import Any

from ..architectures import get
from ..rope.rotary import ResolvedRope
from ..rope.rotary import resolve_rope as _resolve


def resolve_rope(typed: Any, architecture: str) -> ResolvedRope:
    return _resolve(typed, architecture, get(architecture).default_rope_theta)
