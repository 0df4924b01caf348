"""What an engine profile is: data describing how one engine release reads a drafter.

A profile says which config paths the engine reads for each flag and their
defaults, how it counts the aux hidden states it builds fc for, where it takes
the target layers to capture from, which architecture names it registers and
which drafter class each builds, and how its weight loader renames, skips,
rejects or ignores tensor names.  Checks (``checks.py``) are small functions
that compare what the engine will do with what the checkpoint states; a
profile lists the checks that apply to it.  Adding an engine is one module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..spec.drafter import ArchitectureName, DrafterSpec
from ..formats.base.fields import MISSING, get_path

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject, JSONValue
    from ..formats.base import Layout
    from ..formats.base.reading import ReadResult
    from ..spec.report import Effect, EngineForward, Finding, Runner
    from ..config.target import TargetInfo


@dataclass(frozen=True)
class FlagRule:
    """Config paths an engine reads for one flag (first present wins) and its value when none is."""

    paths: tuple[str, ...]
    _: KW_ONLY
    default: bool = False
    null_is_false: bool = False  # the engine tests key presence, so a present null reads as false and wins


@dataclass(frozen=True)
class ActivationRule:
    """What the engine's MLP does with the config's ``hidden_act``: computes it, raises, or computes its own."""

    computes: frozenset[str]  # hidden_act values the engine computes as stated
    _: KW_ONLY
    otherwise: Effect  # what any other value does: "load_fails" (it raises) | "runs_differently" (its own activation)
    why: str  # what the engine does instead, with its code cited


@dataclass(frozen=True)
class DrafterClass:
    """A drafter model class the engine instantiates, and what it reads."""

    name: str
    _: KW_ONLY
    family: ArchitectureName | None  # None: whatever the checkpoint is (the class is not modelled in detail)
    aux_count_paths: tuple[str, ...]  # int paths give K; list paths give len(list)
    aux_count_default: int | None = 3  # None: K comes from the engine's runtime options
    ignores_flags: Mapping[str, bool] = field(default_factory=dict)  # flag -> how the class behaves (it never reads it)
    skips_input_norm: bool = True  # input_norm.* is skipped silently while norm_before_fc is off
    unknown_keys: str | None = None  # overrides KeyRules.unknown for this class
    dropped: tuple[str, ...] = ()  # substrings this class's loader skips on top of KeyRules.dropped
    # other families whose tensors this class loads as its own (vLLM's Llama drafter stacks q/k/v and gate/up into
    # qkv_proj/gate_up_proj, so Phi-3's fused tensors are its parameters as stored)
    loads_families: frozenset[str] = frozenset()


@dataclass(frozen=True)
class KeyRules:
    """How the engine's weight loader treats on-disk tensor names."""

    renames: tuple[tuple[str, str], ...] = ()  # (old prefix, new prefix), first occurrence
    _: KW_ONLY
    dropped: tuple[str, ...] = ()  # substrings dropped before loading (t2d...)
    reject_prefixed: tuple[str, ...] = ()  # prefixes that make the name unloadable (vLLM adds its own model.)
    unknown: str = "raise"  # "raise" | "ignore": an unknown name after renaming
    unknown_bias: str = "ignore"  # an unknown name ending in .bias
    bias_needs_module: bool = False  # the .bias is ignored only as a missing parameter of a module that exists
    d2t_needs_pruned_vocab: bool = False  # d2t has a parameter only when draft_vocab_size != the target's vocab
    raises: str = "raises 'There is no module or parameter named ...' at load"  # what an unknown name does
    missing_fails: str = ""  # why a required tensor that is absent stops loading ("": the engine keeps its init value)


@dataclass(frozen=True)
class CaptureRules:
    """Where the engine takes the target layers to capture from, and how it numbers them."""

    paths: tuple[str, ...]  # read by every runner, first present wins
    _: KW_ONLY
    # (path, which runners read it and which ignore it, the runner that ignores it: a finding about that runner)
    some_runners: tuple[tuple[str, str, Runner], ...] = ()
    default: str = "(2, L//2, L-3)"
    default_ids: Callable[[int], tuple[int, ...]] | None = None
    shift: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda ids: ids  # engine-side renumbering (SGLang +1)
    shift_rule: str = ""
    from_runtime: str | None = None  # the engine takes the layers from a runtime option, not the config
    # where the engine captures each target layer once, however often the ids name it (a membership test while
    # the target runs), so duplicate ids send fewer states to fc than it is built for; "" when not modelled
    captures_once: str = ""
    repeats_kept: bool = False  # the engine copies a layer once per id, so repeated ids still fill fc
    out_of_range_fails: str = ""  # what the engine does on an id past the target's last layer ("": never captured)


@dataclass(frozen=True)
class EngineProfile:
    """One engine release, as data plus the named checks that apply to it."""

    engine: str
    _: KW_ONLY
    version: str
    summary: str
    flags: dict[str, FlagRule]
    classes: dict[str, DrafterClass]  # registered architecture name -> class ({} with default_class: not modelled)
    capture: CaptureRules
    keys: KeyRules | None  # None: the loader's behaviour is not modelled
    registry_complete: bool = True  # False: an unknown architecture is a warning, not an error
    default_class: DrafterClass | None = None  # used when the registry is not modelled (classes == {})
    rejected_architectures: dict[str, str] = field(default_factory=dict)  # name -> what the engine does instead
    resolve_architecture: Callable[[str], str] = lambda a: a  # e.g. vLLM's EAGLEConfig 'Eagle3' prefix
    wrapped_mla_model_types: frozenset[str] | None = None  # MLA detection for a wrapped drafter config
    speculators_view: Callable[[Mapping[str, JSONValue]], Translation] | None = None
    shares_from_target: dict[str, str] = field(default_factory=dict)  # canonical -> "absent" | "always" | "same_width"
    tensor_parallel: bool = False
    activation: ActivationRule | None = None  # None: what the engine does with hidden_act is not modelled
    reads_gguf: bool = False  # loads llama.cpp's one-file GGUF drafter (else its checks do not apply to one)
    gguf_checks: tuple[Callable[..., list[Finding]], ...] = ()  # run instead of ``checks`` on a GGUF drafter
    checks: tuple[Callable[..., list[Finding]], ...] = ()
    # of ``checks``, those whose errors stop the engine before a first draft (simulate and --forward refuse), beside
    # the architecture and aux-count checks every profile has
    load_checks: tuple[Callable[..., list[Finding]], ...] = ()
    # how the engine serves a drafter it loads (engines.view.serving_view: simulate); None: not modelled that far
    serve: Callable[[DrafterView], DrafterView] | None = None
    packs_linears: bool = False  # runs its linears through oneDNN with weights reordered once (vLLM's CPU backend)
    # simulate's decode loop for this engine, named as data (engines/ sits below simulate/): a module of
    # eagleconv.simulation (``vllm``, ``llamacpp``) or a dotted module path, whose ``simulate_loop(job)`` runs it;
    # None: simulate refuses the engine
    decode_loop: str | None = None
    # the server protocol measure speaks to it (a key of eagleconv.measurement.servers.PROFILES: ``vllm``, vLLM's
    # OpenAI-compatible /v1/completions and vllm:* metrics; ``llama.cpp``, llama-server's /completion and
    # llamacpp:* metrics); None: ``measure --engine`` does not offer it
    server: str | None = None
    rank: int = 100  # where the engine is listed (``all``, error messages, the findings reference): lower first
    history: tuple[str, ...] = ()  # what changed around this release, for the findings reference

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"


@dataclass
class Translation:
    """A foreign config family (speculators) rewritten into the config the engine's class reads."""

    config: JSONObject | None
    _: KW_ONLY
    problems: list[str] = field(default_factory=list)  # the engine raises while translating
    defaulted: dict[str, str] = field(default_factory=dict)  # flag -> why the engine filled it in


@dataclass
class Subject:
    """What is being validated: a config, optionally with tensors, seen through a layout."""

    config: JSONObject
    _: KW_ONLY
    layout: type[Layout] | None
    read: ReadResult | None
    names: set[str]  # tensor names as stored on disk (empty for lint)
    has_tensors: bool
    path: str | None = None
    target: TargetInfo | None = None
    tp: int | None = None

    @property
    def spec(self) -> DrafterSpec | None:
        return self.read.spec if self.read is not None else None

    def stated(self, key: str) -> Any:
        """The value the checkpoint's config states for a canonical field, or None if absent."""
        if self.layout is None or key not in self.layout.fields:
            return None
        for path in self.layout.fields[key].read:
            value = get_path(self.config, path)
            if value is not MISSING:
                return value
        return None


@dataclass
class EngineView:
    """The checkpoint as one engine release will see it."""

    profile: EngineProfile
    _: KW_ONLY
    config: JSONObject  # the config the engine's model class reads (after any translation)
    speculators: bool
    architecture: str | None  # after the engine's rewrite
    cls: DrafterClass | None
    flags: dict[str, tuple[bool, str]]  # flag -> (value, where it came from)
    aux_count: int | None
    aux_count_source: str
    problems: list[str] = field(default_factory=list)  # translation failures (the engine raises)


def lookup(config: Mapping[str, JSONValue], path: str) -> Any:
    value = get_path(config, path)
    return None if value is MISSING else value


def read_flag(config: Mapping[str, JSONValue], rule: FlagRule) -> tuple[bool, str]:
    for path in rule.paths:
        value = get_path(config, path)
        if value is None and rule.null_is_false:
            return False, f"{path} is null"
        if value is not None and value is not MISSING:
            return bool(value), path
    return rule.default, f"default {str(rule.default).lower()}"


def read_aux_count(config: Mapping[str, JSONValue], cls: DrafterClass) -> tuple[int | None, str]:
    for path in cls.aux_count_paths:
        value = lookup(config, path)
        if isinstance(value, list) and value:
            return len(value), f"len({path})"
        if isinstance(value, int) and not isinstance(value, bool):
            return value, path
    if cls.aux_count_default is None:
        return None, "the engine's runtime options"
    return cls.aux_count_default, f"default {cls.aux_count_default}"


def engine_view(profile: EngineProfile, subject: Subject) -> EngineView:
    """Translate the checkpoint's config the way the engine does, then resolve class, flags and K."""
    config, speculators, problems, defaulted = subject.config, False, [], {}
    if "speculators_model_type" in config and profile.speculators_view is not None:
        translation = profile.speculators_view(config)
        speculators, problems, defaulted = True, translation.problems, translation.defaulted
        config = translation.config or {}
    archs = config.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    architecture, cls = None, profile.default_class if not profile.classes else None
    for name in names if profile.classes else ():  # engines instantiate the first architecture they know
        rewritten = name if speculators else profile.resolve_architecture(name)
        architecture = architecture or rewritten
        if rewritten in profile.classes:
            architecture, cls = rewritten, profile.classes[rewritten]
            break
    flags: dict[str, tuple[bool, str]] = {}
    for flag, rule in profile.flags.items():
        if cls is not None and flag in cls.ignores_flags:
            behaves = cls.ignores_flags[flag]
            flags[flag] = (behaves, f"{cls.name} does not read it and behaves as {str(behaves).lower()}")
        elif flag in defaulted:
            flags[flag] = (read_flag(config, rule)[0], defaulted[flag])
        else:
            flags[flag] = read_flag(config, rule)
    count, source = (read_aux_count(config, cls) if cls is not None else (None, "unknown class"))
    return EngineView(profile, config=config, speculators=speculators, architecture=architecture, cls=cls, flags=flags,
                      aux_count=count, aux_count_source=source, problems=problems)


# What an engine leaves in a parameter the checkpoint does not fill: a norm's identity scale (its initial weight),
# all-zero draft-to-target offsets (draft id i = target id i), or the target's LM head rows.
FillKind = Literal["unit_norm", "zero_offsets", "target_lm_head"]


@dataclass(frozen=True)
class Fill:
    """A tensor the engine supplies itself: what it holds, and its shape."""

    kind: FillKind
    _: KW_ONLY
    shape: tuple[int, ...]


@dataclass(kw_only=True)
class DrafterView:
    """One engine release's drafter, built from a checkpoint (``view_drafter``; ``serving_view`` for simulate)."""

    profile: EngineProfile
    subject: Subject  # the checkpoint, as validate's engine checks see it
    reading: EngineView  # the config as the engine's model class reads it
    report: EngineForward  # flags, captured layers and whether it loads: validate --forward --engine's entry
    spec: DrafterSpec | None  # the spec the engine builds; None when it stops before building one
    layers: tuple[int, ...]  # target layers captured (hidden_state_index), ascending, repeats kept
    target_layers: int | None = None  # the target's depth, when known
    guessed: bool = False  # the config names no aux layers: ``layers`` is the engine's guess
    fills: dict[str, Fill] = field(default_factory=dict)  # canonical name -> what the engine leaves there
    capture: tuple[int, ...] = ()  # serving: the distinct target layers the runner captures
    notes: list[str] = field(default_factory=list)  # serving: what differs from the checkpoint, for simulate's notes
    refused: str | None = None  # serving: why the engine will not serve it (or what it drafts cannot be predicted)
