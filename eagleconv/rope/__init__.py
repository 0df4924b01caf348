"""RoPE in the two spellings readers use, so every reader of an output sees the same rotary embedding.

transformers 4.x (and the engines built on it) read ``rope_theta`` and
``rope_scaling`` and ignore ``rope_parameters``; transformers 5 reads
``rope_parameters`` first and converts the legacy pair only when it is absent.
A config with ``rope_parameters`` alone is therefore read with theta 10000 by
transformers 4.57.  eagleconv writes both spellings, equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters")


def rope_kind(block: Mapping[str, object]) -> object:  # any JSON value a config states; callers compare it
    """The rope type a rope_scaling or rope_parameters block states (``type`` is the older spelling)."""
    return block.get("rope_type", block.get("type", "default"))


def both_spellings(stated: Mapping[str, object]) -> dict[str, object]:
    """``rope_theta`` (+ ``rope_scaling`` when not default) and ``rope_parameters``, from whichever the config stated.

    ``rope_parameters`` wins where the source stated both differently (what transformers 5 reads); a stated
    ``rope_scaling`` is written back exactly.  Nothing is written when the config stated no rope at all.
    """
    params = stated.get("rope_parameters")
    scaling = stated.get("rope_scaling")
    theta = stated.get("rope_theta")
    if isinstance(params, Mapping):
        theta = params.get("rope_theta", theta)
        same = isinstance(scaling, Mapping) and rope_kind(scaling) == rope_kind(params) and all(
            params.get(k) == v for k, v in scaling.items() if k not in ("type", "rope_type"))
        if rope_kind(params) not in ("default", None) and not same:
            scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        elif not isinstance(scaling, Mapping) or rope_kind(scaling) in ("default", None):
            scaling = None
    out: dict[str, object] = {}
    if theta is not None:
        out["rope_theta"] = theta
    if isinstance(scaling, Mapping):
        out["rope_scaling"] = dict(scaling)
    if theta is None and not isinstance(scaling, Mapping):
        return {k: stated[k] for k in ROPE_KEYS if k in stated}  # nothing typed to restate: pass through
    rebuilt: dict[str, object] = {"rope_type": "default"}
    if isinstance(scaling, Mapping):
        rebuilt = {"rope_type": rope_kind(scaling), **{k: v for k, v in scaling.items() if k not in ("type", "rope_type")}}
    if theta is not None:
        rebuilt["rope_theta"] = theta
    out["rope_parameters"] = rebuilt
    return out


def reader_disagreement(stated: Mapping[str, Any]) -> tuple[str, str] | None:
    """(severity, why) when transformers 4.x and 5.x would read this config's RoPE differently, else None."""
    params = stated.get("rope_parameters")
    if not isinstance(params, Mapping):
        return None
    theta5 = params.get("rope_theta")
    kind5 = rope_kind(params)
    theta4 = stated.get("rope_theta")
    scaling4 = stated.get("rope_scaling")
    kind4 = rope_kind(scaling4) if isinstance(scaling4, Mapping) else "default"
    if theta4 is None and not isinstance(scaling4, Mapping):
        if theta5 in (None, 10000, 10000.0) and kind5 in ("default", None):
            return None
        return ("warning", f"rope is stated only as rope_parameters (theta {theta5}, type {kind5}): transformers 4.x "
                           "and readers built on it ignore it and use rope_theta 10000 without scaling")
    if theta4 is not None and theta5 is not None and float(theta4) != float(theta5):
        return ("error", f"rope_theta = {theta4} but rope_parameters.rope_theta = {theta5}: transformers 4.x reads "
                         "the first, transformers 5 the second")
    if (kind4 if kind4 is not None else "default") != (kind5 if kind5 is not None else "default"):
        return ("error", f"rope_scaling type {kind4} but rope_parameters type {kind5}: transformers 4.x reads the "
                         "first, transformers 5 the second")
    return None
