"""What a layout is: a rename table, a config field table, and a few named hooks.

A layout (``specforge``, ``vllm``, ``speculators``...) is a subclass of
:class:`Layout` whose class attributes are data, registered with
``@register``.  The generic machinery lives beside it, one job to a module
(issue 26): tensor renames (:mod:`~eagleconv.formats.base.renames`), config field
tables (:mod:`~eagleconv.formats.base.fields`), reading a config into a
:class:`DrafterSpec` (:mod:`~eagleconv.formats.base.reading`: config value, else
exactly derived from tensor shapes, else the layout's own documented default;
each non-config value is reported), writing a spec back out as a config
(:mod:`~eagleconv.formats.base.writing`), and the JSON type rules
(:mod:`eagleconv.spec.config_types`).  They are modules of this package, not of
``formats/``, because every module of ``formats/`` but ``base`` is a layout
(``registry.entry_modules``: the CLI lists ``--to``/``--from`` from the file
names).  ``__init__`` holds the layout class and its detection helpers; a
layout module imports each other name from the module that defines it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ...architectures.base import InLayout, Verdict
from .holding import Holding
from ...spec.drafter import AuxConvention, DrafterSpec, EagleFlags
from .fields import ConfigField, hf_fields
from .output import CheckpointOutput, Output
from .renames import Rename

if TYPE_CHECKING:
    from ...support.jsonio import JSONObject, JSONValue

# -- the layout class -------------------------------------------------------------

@dataclass(frozen=True)
class Capability:
    """A canonical tensor a layout cannot store, and what happens to it on the way in.

    ``derive``: dropped silently-but-reported because it is exactly re-derivable
    (t2d from d2t).  ``drop``: information would be lost, so it is dropped only
    when the user names it with ``--drop``.  ``never``: the layout cannot carry
    it at all (conversion is refused).
    """

    pattern: str
    policy: str  # "derive" | "drop" | "never"
    reason: str


@dataclass(frozen=True)
class Seen:
    """What detection looks at: the config, the stored tensor names, and how weights are stored.

    ``names`` is None when only a config is at hand (``eagleconv lint``).
    """

    config: Mapping[str, JSONValue]
    names: set[str] | None
    metadata: Mapping[str, str] = field(default_factory=dict)
    weights_kind: str = "safetensors"


class Layout(metaclass=Holding):
    """Base class of every registered layout.  Subclasses set data, rarely code.

    ``architectures`` and ``model_types`` are read from ``holds`` and the architectures' ``layouts`` when asked
    (:mod:`~eagleconv.formats.base.holding`), so registration order does not matter.
    """

    name: ClassVar[str]
    producer: ClassVar[str]
    description: ClassVar[str]
    renames: ClassVar[tuple[Rename, ...]] = (Rename("{rest}", "{rest}"),)
    # substring renames the layout's own loader applies before it maps a name (vLLM's ``orig_to_new_substr``,
    # first occurrence): a name they make readable is read, and reported as not the layout's spelling (EC003 info)
    loader_aliases: ClassVar[tuple[tuple[str, str], ...]] = ()
    # other spellings of the layout's names found in the wild (an HF *ForCausalLM state dict nests the decoder
    # under ``model.``): read, never written, each reported (EC003 info); whether an engine loads them is its profile's
    spellings: ClassVar[tuple[Rename, ...]] = ()
    fields: ClassVar[Mapping[str, ConfigField]] = hf_fields()
    aux_convention: ClassVar[AuxConvention] = "hidden_state_index"
    defaults: ClassVar[dict[str, Any]] = {}
    # architecture name -> how this layout writes it (its config ``architectures``, rewritten model_types, aux
    # numbering); an architecture written after the layout says it in its own ``layouts`` instead
    holds: ClassVar[Mapping[str, InLayout]] = {}
    # what an engine profile says of a clean drafter of any family in this layout (tests/architectures/test_contract.py)
    verdicts: ClassVar[tuple[Verdict, ...]] = ()
    flags: ClassVar[frozenset[str]] = frozenset(EagleFlags.model_fields)
    fixed_aux_count: ClassVar[int | None] = None
    max_layers: ClassVar[int | None] = None
    cannot_hold: ClassVar[tuple[Capability, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()
    meta_keys: ClassVar[frozenset[str]] = frozenset({"architectures", "transformers_version", "eagleconv"})
    carries_verifier: ClassVar[bool] = False  # whether the config can name the target model
    # Converting into it needs the target model's metadata (--target): llama.cpp's GGUF carries the target's
    # tokenizer.  Such a layout is a serving format, not a producer's: tests and synthetic drafters skip it.
    needs_target: ClassVar[bool] = False
    # Its writer (issue 34): how convert stores and writes the planned tensors (base/output.py).
    output: ClassVar[type[Output]] = CheckpointOutput
    # What to do instead, for a drafter this layout refuses: by flag name, "aux_count" or "architecture"
    way_out: ClassVar[dict[str, str]] = {}

    # hooks ------------------------------------------------------------------
    @classmethod
    def detect(cls, seen: Seen) -> tuple[int, list[str]]:
        """How strongly (0 = not at all) the checkpoint is in this layout, and why.

        A checkpoint eagleconv wrote names its layout; anything else is judged
        by ``looks_like`` from the config and the tensor names.
        """
        score, why = marker_score(cls, seen.config)
        return (score, why) if score else cls.looks_like(seen)

    @classmethod
    def looks_like(cls, seen: Seen) -> tuple[int, list[str]]:
        """Layout-specific evidence from config and tensor names (see each layout)."""
        return 0, []

    @classmethod
    def extra_config(cls, spec: DrafterSpec) -> JSONObject:
        """Layout-owned config keys to add when writing (speculators_config...)."""
        return {}

    @classmethod
    def requires_for(cls, spec: DrafterSpec) -> tuple[str, ...]:
        """Canonical tensors this layout's reader needs for ``spec`` (derived exactly when the source lacks them)."""
        return cls.requires

    @classmethod
    def aux_convention_for(cls, architecture: str) -> AuxConvention:
        """Numbering convention of the aux ids this layout stores for ``architecture`` (the architecture may say)."""
        held = cls.holding(architecture)
        if held is not None and held.aux_convention:
            return held.aux_convention  # type: ignore[return-value]
        return cls.aux_convention

    @classmethod
    def read_extra(cls, config: Mapping[str, JSONValue]) -> dict[str, Any]:
        """Layout-owned values read into the spec (the verifier...)."""
        return {}

    # generic machinery ------------------------------------------------------
    @classmethod
    def decoder_prefix(cls) -> str:
        path = cls.fields["hidden_size"].read[0]
        return path[: -len("hidden_size")]

    @classmethod
    def holding_policy(cls, canonical: str) -> Capability | None:
        for cap in cls.cannot_hold:
            if re.fullmatch(cap.pattern, canonical):
                return cap
        return None


# -- detection helpers ------------------------------------------------------------

def architectures_of(config: Mapping[str, JSONValue]) -> list[str]:
    archs = config.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def has_prefix(names: set[str], prefix: str) -> bool:
    return any(n.startswith(prefix) for n in names)


def marker_score(layout: type[Layout], config: Mapping[str, JSONValue]) -> tuple[int, list[str]]:
    """Checkpoints written by eagleconv name their layout in config['eagleconv']['layout']."""
    stamp = config.get("eagleconv")
    if isinstance(stamp, Mapping) and stamp.get("layout") == layout.name:
        return 1000, [f"config.json eagleconv.layout = {layout.name!r} (written by eagleconv)"]
    return 0, []
