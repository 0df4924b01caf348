"""What a transform (``upgrade``, ``downgrade``) hands the conversion plan besides a new layout.

Split from ``conversion.py`` (issue 26): the data :mod:`eagleconv.eagle31.transforms` and :mod:`eagleconv.eagle31.api`
build, and the plan consumes; no logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.drafter import DrafterSpec
from ..spec.report import StepDivergence


@dataclass(frozen=True)
class Computed:
    """A tensor a transform built in memory: canonical name, safetensors dtype, shape, bytes, and why."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes
    reason: str


@dataclass
class Transform:
    """What a transform does to a drafter besides its layout.

    ``spec``: the drafter afterwards.  ``computed``: canonical tensors it
    replaces or adds.  ``removed``: canonical tensors it takes away, with the
    reason.  ``exact``: whether the result computes what the source did;
    ``divergence``: measured per draft step when it does not.
    """

    name: str
    spec: DrafterSpec
    computed: dict[str, Computed] = field(default_factory=dict)
    removed: dict[str, str] = field(default_factory=dict)
    exact: bool = True
    divergence: list[StepDivergence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
