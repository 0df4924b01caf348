"""llama.cpp b11434 loading a GGUF drafter: what its loader and first draft need from the file itself.

The llama.cpp profile's other checks model the safetensors -> GGUF path (its converter); these apply to a file
that is already a GGUF (``validate --engine llama.cpp DRAFTER.gguf``).  Each rule is read from b11434's code and
was run through ``llama-speculative-simple`` on the SmolLM2 pair with one field broken
(tests/engines/test_llamacpp_gguf.py repeats that where a build is cached):

* ``src/models/eagle3.cpp`` ``load_arch_hparams``: ``eagle3.target_layers`` required ("requires 'extract_layers'")
  with exactly 3 entries; ``eagle3.target_hidden_size`` and the rms epsilon required ("key not found in model");
  ``src/llama-model.cpp``: context length, embedding length and block count required;
* ``load_arch_tensors``: each tensor created with its dims ("check_tensor_dims: ... not found / has wrong
  shape"), ``enc.output_norm`` only with ``norm_before_fc``, and any tensor it does not create fails the count
  ("done_getting_tensors: wrong number of tensors"); ``output`` sized by ``d2t``'s length;
* the graph, at the first draft: ``d2t`` must be I64 and as long as the output's rows (GGML_ASSERT), one block;
* ``common/speculative.cpp``: the encoder's input is 3 x the *target's* hidden size (``get_sub_batch: failed to
  add embedding`` when ``target_hidden_size`` differs) and an id past the target's last layer aborts at startup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..spec.report import Finding
from .base import EngineView, Subject, lookup
from .checks import emits, finding

if TYPE_CHECKING:
    from ..support.jsonio import JSONValue

AUX_COUNT = 3
# config field (the GGUF layout's reading of the key) -> the GGUF key llama.cpp's loader requires
REQUIRED_KEYS = {"max_position_embeddings": "eagle3.context_length", "hidden_size": "eagle3.embedding_length",
                 "num_hidden_layers": "eagle3.block_count", "rms_norm_eps": "eagle3.attention.layer_norm_rms_epsilon",
                 "target_hidden_size": "eagle3.target_hidden_size"}
LAYER_TENSORS = ("attn_norm", "attn_norm_2", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                 "ffn_up", "ffn_down")
OPTIONAL = ("output.weight", "token_embd.weight", "rope_freqs.weight", "d2t")
FIRST_DRAFT = "the first draft aborts"


def _shapes(subject: Subject) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> row-major shape (every tensor in the file, mapped by the layout or not)."""
    read = subject.read
    if read is None:
        return {}
    return {read.canonical[c]: tuple(info.shape) for c, info in read.tensors.items() if c in read.canonical}


def _int(config: Mapping[str, JSONValue], key: str) -> int | None:
    value = lookup(config, key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def expected_tensors(config: Mapping[str, JSONValue], names: set[str]) -> dict[str, tuple[int, ...] | None]:
    """The tensors ``load_arch_tensors`` creates for this header (row-major dims; None where a size is unknown)."""
    n, ths = _int(config, "hidden_size"), _int(config, "target_hidden_size")
    heads, kv_heads = _int(config, "num_attention_heads"), _int(config, "num_key_value_heads")
    head_dim, ff = _int(config, "head_dim"), _int(config, "intermediate_size")
    blocks = _int(config, "num_hidden_layers") or 1
    if head_dim is None and n is not None and heads:
        head_dim = n // heads
    q = heads * head_dim if heads is not None and head_dim is not None else None
    kv = (kv_heads if kv_heads is not None else heads)
    kvd = kv * head_dim if kv is not None and head_dim is not None else None
    enc = AUX_COUNT * ths if ths is not None else None

    def dims(*d: int | None) -> tuple[int, ...] | None:
        return None if any(x is None for x in d) else tuple(x for x in d if x is not None)

    out: dict[str, tuple[int, ...] | None] = {"fc.weight": dims(n, enc), "output_norm.weight": dims(n)}
    if lookup(config, "norm_before_fc") is True:
        out["enc.output_norm.weight"] = dims(enc)
    two = 2 * n if n is not None else None
    for i in range(blocks):
        b = f"blk.{i}."
        out |= {b + "attn_norm.weight": dims(n), b + "attn_norm_2.weight": dims(n), b + "attn_q.weight": dims(q, two),
                b + "attn_k.weight": dims(kvd, two), b + "attn_v.weight": dims(kvd, two),
                b + "attn_output.weight": dims(n, q), b + "ffn_norm.weight": dims(n), b + "ffn_gate.weight": dims(ff, n),
                b + "ffn_up.weight": dims(ff, n), b + "ffn_down.weight": dims(n, ff)}
    vocab = _int(config, "vocab_size")
    d2t = _int(config, "draft_vocab_size") if "d2t" in names else vocab
    if "output.weight" in names:
        out["output.weight"] = dims(d2t, n)
    return out


@emits("EC004", "EC010", "EC011", "EC013", "EC052")
def check_gguf_header(subject: Subject, view: EngineView) -> list[Finding]:
    """The keys llama.cpp's loader requires, the 3 target layers, and (with --target) the target they name."""
    config, label, out = subject.config, view.profile.label, []
    for field, key in REQUIRED_KEYS.items():
        if lookup(config, field) is None:
            out.append(finding(view, "EC004", "error", f"no {key}: {label}'s loader requires it and the drafter does not "
                               f"load ('key not found in model: {key}')", effect="load_fails"))
    ids = lookup(config, "eagle_aux_hidden_state_layer_ids")
    if not isinstance(ids, list):
        out.append(finding(view, "EC010", "error", f"no eagle3.target_layers: {label} does not load the drafter "
                           "(eagle3.cpp: \"EAGLE3 model requires 'extract_layers' in GGUF metadata\")",
                           effect="load_fails"))
    elif len(ids) != AUX_COUNT:
        out.append(finding(view, "EC011", "error", f"eagle3.target_layers lists {len(ids)} layers {ids}; {label} "
                           f"requires exactly {AUX_COUNT} ('EAGLE3 requires exactly 3 entries in extract_layers')",
                           effect="load_fails"))
    target = subject.target
    if target is None:
        return out
    if isinstance(ids, list):
        past = [i for i in ids if isinstance(i, int) and i > target.num_hidden_layers]
        if past:
            out.append(finding(view, "EC013", "error", f"eagle3.target_layers {ids}: {past[0]} is past the target's "
                               f"{target.num_hidden_layers} layers (id {target.num_hidden_layers} is its final state); "
                               f"{label} aborts at startup ('EAGLE3: target layer id {past[0]} exceeds target n_layer')",
                               effect="load_fails"))
    ths = _int(config, "target_hidden_size")
    if ths is not None and ths != target.hidden_size:
        out.append(finding(view, "EC052", "error", f"eagle3.target_hidden_size = {ths} but the target's hidden size is "
                           f"{target.hidden_size}: {label} fills the encoder with 3 x {target.hidden_size} features "
                           f"per token for an fc built for 3 x {ths}, and {FIRST_DRAFT} (common.cpp get_sub_batch: "
                           "'failed to add embedding')", effect="load_fails"))
    return out


@emits("EC003", "EC021", "EC030", "EC040", "EC050")
def check_gguf_tensors(subject: Subject, view: EngineView) -> list[Finding]:
    """The tensor set and dims ``load_arch_tensors`` creates, d2t's type, and one decoder block."""
    config, label, out = subject.config, view.profile.label, []
    names, shapes = set(subject.names), _shapes(subject)
    expected = expected_tensors(config, names)
    blocks = _int(config, "num_hidden_layers")
    nbf = lookup(config, "norm_before_fc") is True
    if not nbf and "enc.output_norm.weight" in names:
        out.append(finding(view, "EC021", "error", f"enc.output_norm.weight without eagle3.norm_before_fc = true: "
                           f"{label} never creates it and the load fails ('wrong number of tensors'). Set the flag "
                           "if the drafter was trained with that norm, else drop the tensor", "enc.output_norm.weight",
                           effect="load_fails"))
    missing = [n for n in expected if n not in names]
    if nbf and "enc.output_norm.weight" in missing:
        out.append(finding(view, "EC021", "error", f"eagle3.norm_before_fc = true but there is no "
                           f"enc.output_norm.weight: {label} does not load the drafter (check_tensor_dims: tensor "
                           "'enc.output_norm.weight' not found)", "enc.output_norm.weight", effect="load_fails"))
        missing.remove("enc.output_norm.weight")
    if missing:
        out.append(finding(view, "EC003", "error", f"{', '.join(missing)} missing: {label} does not load the drafter "
                           f"(check_tensor_dims: tensor '{missing[0]}' not found)",
                           missing[0] if len(missing) == 1 else None, effect="load_fails"))
    extra = sorted(n for n in names if n not in expected and n not in OPTIONAL and n != "enc.output_norm.weight")
    if extra:
        out.append(finding(view, "EC003", "error", f"{', '.join(extra)}: {label} creates no such tensor and the load "
                           f"fails ('done_getting_tensors: wrong number of tensors')",
                           extra[0] if len(extra) == 1 else None, effect="load_fails"))
    for name, dims in expected.items():
        got = shapes.get(name)
        if dims is not None and got is not None and tuple(got) != dims:
            out.append(finding(view, "EC050", "error", f"{name} is {list(got)} but {label} builds it as {list(dims)} "
                               f"from the header: the load fails ('{name}' has wrong shape)", name,
                               effect="load_fails"))
    if blocks is not None and blocks != 1 and not missing:
        out.append(finding(view, "EC040", "error", f"eagle3.block_count = {blocks}: {label}'s eagle3 graph has one "
                           f"decoder layer and {FIRST_DRAFT} (GGML_ASSERT n_layer == 1)", effect="load_fails"))
    d2t = subject.read.tensors.get("d2t") if subject.read is not None else None
    if d2t is not None and d2t.dtype != "I64":
        out.append(finding(view, "EC030", "error", f"d2t is {d2t.dtype}: {label} loads it, then {FIRST_DRAFT} "
                           "(eagle3.cpp GGML_ASSERT d2t->type == GGML_TYPE_I64); store it as I64 absolute target ids "
                           "(eagleconv convert --to gguf does)", "d2t", effect="load_fails"))
    vocab = _int(config, "vocab_size")
    if d2t is not None and "output.weight" not in names and vocab is not None and d2t.shape[0] != vocab:
        out.append(finding(view, "EC050", "error", f"d2t maps {d2t.shape[0]} draft ids but there is no output.weight: "
                           f"{label} uses the target's output ({vocab} rows) and {FIRST_DRAFT} (eagle3.cpp "
                           "GGML_ASSERT d2t->ne[0] == n_draft_vocab)", "d2t", effect="load_fails"))
    return out


GGUF_CHECKS = (check_gguf_header, check_gguf_tensors)
