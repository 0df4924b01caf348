"""A Llama, Qwen3 or DeepSeek-V3 target model run by eagleconv's own forward, without importing transformers.

``simulate`` spends most of its time importing transformers' modeling chain (about 2.3 s of a 4.2 s run on a
2-core machine: torch._dynamo, torch.distributed.tensor, scipy through the loss modules), not computing.  For the
two dense architectures eagleconv already runs as drafters, the target's decoder layers are the same math
(vLLM's: RMSNorm in float32, neox RoPE from a float32 cos/sin cache, causal softmax attention in float32, SiLU
MLP), so the target runs through the architecture's own attention and eagleconv's norm ops.  A DeepSeek-V3 target
runs through the MLA drafter's attention, with its MoE layers from :mod:`.native_deepseek` (importing transformers'
DeepSeek-V3 model alone took ~3.6 s of simulate's ~7.5 CPU s on the MLA pair).

Only configs whose every field is understood run here; anything else (another model type, a field that changes
the math such as ``mlp_bias``, sliding windows, an unknown rope type, a missing lm_head) raises
:class:`NativeUnsupported` with the reason, and ``open_target(runtime="auto")`` falls back to transformers.  The
test suite and the vLLM parity tier check this runtime against transformers and against vLLM itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from ..errors import UsageError
from .inputs import Target, run_target
from .native_deepseek import FIELDS as DEEPSEEK_FIELDS, Moe, mlp_tensors, moe

if TYPE_CHECKING:
    from ..nn.attention import LayerCache
    from .protocols import TargetModel


ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "DeepseekV3ForCausalLM": "deepseek_v3"}
FAMILY = {"deepseek_v3": "deepseek_mla"}  # model_type -> eagleconv architecture, where the names differ
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "rms_norm_eps")
# Fields that do not change the forward (metadata, generation defaults, training-only settings).
INERT = frozenset({"architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
                   "torch_dtype", "dtype", "transformers_version", "max_position_embeddings", "use_cache",
                   "_name_or_path", "attention_dropout", "tie_word_embeddings", "num_key_value_heads", "head_dim",
                   "hidden_act", "mlp_bias", "attention_bias", "pretraining_tp", "rope_scaling", "rope_parameters",
                   "use_sliding_window", "sliding_window", "max_window_layers", "layer_types", "output_attentions",
                   "output_hidden_states", "return_dict", "tokenizer_class", "rope_theta", "chunk_size_feed_forward",
                   "id2label", "label2id", "is_encoder_decoder", "problem_type", "unk_token_id",
                   # written by nanotron and transformers.js into published Llama configs (SmolLM2): neither
                   # transformers nor vLLM reads them; rope_interleaved is held to False below
                   "is_llama_config", "rope_interleaved", "transformers.js_config", *REQUIRED})
ROPE_KINDS = ("none", "linear", "llama3", "yarn")


class NativeUnsupported(Exception):
    """This target needs transformers: the message says which field or tensor eagleconv does not run."""


def _check_config(cfg: dict[str, Any]) -> str:
    """The architecture name when eagleconv runs this config exactly; NativeUnsupported otherwise."""
    arch = cfg.get("architectures") or []
    if len(arch) != 1 or arch[0] not in ARCHITECTURES or cfg.get("model_type") != ARCHITECTURES[arch[0]]:
        raise NativeUnsupported(f"architectures {arch} / model_type {cfg.get('model_type')!r}: eagleconv runs "
                                f"only {', '.join(ARCHITECTURES)} targets itself")
    own = DEEPSEEK_FIELDS if arch[0] == "DeepseekV3ForCausalLM" else frozenset()
    unknown = sorted(k for k in cfg if k not in INERT and k not in own)
    if unknown:
        raise NativeUnsupported(f"config fields eagleconv does not model: {', '.join(unknown)}")
    missing = [k for k in REQUIRED if cfg.get(k) is None]
    if missing:
        raise NativeUnsupported(f"config states no {', '.join(missing)} (transformers would default them)")
    rules = {"hidden_act": ("silu", "silu"), "mlp_bias": (False, False), "pretraining_tp": (1, 1),
             "use_sliding_window": (False, False), "attention_dropout": (0.0, 0.0),
             # transformers and vLLM run neox RoPE whatever this says: a True would mean weights trained for
             # interleaved RoPE, which neither engine (nor this runtime) computes
             "rope_interleaved": (False, False)}
    for key, (default, wanted) in rules.items():
        if cfg.get(key, default) != wanted:
            raise NativeUnsupported(f"{key} = {cfg.get(key)!r}")
    types = cfg.get("layer_types")
    if types is not None and any(t != "full_attention" for t in types):
        raise NativeUnsupported("layer_types other than full_attention")
    model_type = ARCHITECTURES[arch[0]]
    return FAMILY.get(model_type, model_type)


def _read_weights(directory: Path) -> tuple[dict[str, torch.Tensor], dict[str, Callable[[int, int], None]]]:
    """Every tensor of the target's safetensors files (index or single file), float32, ``model.`` prefix dropped,
    and for those that are views of a file mapping what drops their pages (weights.DictSource.drop).

    Float32 tensors stay views of a private mapping of the files (eagleconv.io's reader): the weights are in
    memory once, as page cache, instead of once mapped and once copied (issue 15: peak RSS at most 1.5x the
    weights' bytes).  Other dtypes are upcast copies.
    """
    from ..io.reader import open_checkpoint
    from ..io.torch_tensors import TorchTensors

    if not ((directory / "model.safetensors.index.json").is_file() or (directory / "model.safetensors").is_file()):
        raise NativeUnsupported("no model.safetensors (or index) in the target directory")
    store = open_checkpoint(directory)  # the index's paths inside the directory, each header pre-parsed: no fallback
    try:
        from ..support.bounds import check_memory

        check_memory(sum(i.numel for i in store.tensors.values()) * 4, "the target's weights in float32", directory,
                     "its safetensors")
        if not store.weights_kind.startswith("safetensors"):
            raise NativeUnsupported(f"weights stored as {store.weights_kind}, not safetensors")
        tensors = TorchTensors(store, {name: name for name in store.tensors})
        out = {name.removeprefix("model."): tensors[name].float() for name in store.tensors}
        droppers = {name.removeprefix("model."): drop for name in store.tensors
                    if tensors.info(name).dtype == "F32" and (drop := tensors.page_dropper(name)) is not None}
        tensors.close()  # the tensors keep their mappings
    finally:
        store.close()
    return out, droppers


class NativeTarget:
    """The same interface as ``eagleconv.forward.inputs.Target`` (transformers), computed by eagleconv, float32."""

    runtime = "eagleconv"
    fallback: str | None = None

    def __init__(self, directory: str | Path):
        from ..architectures import get
        from ..spec.drafter import Rope
        from .ops import get_ops
        from ..rope.rotary import resolve_rope
        from .weights import DictSource, Weights

        from ..config.target import check_target_weights, read_target_config

        self.path = Path(directory)
        _, cfg = read_target_config(self.path)  # strict, bounded and typed: one line naming the field
        check_target_weights(self.path, cfg)
        arch = _check_config(cfg)
        try:
            typed_rope = Rope.from_config(cfg, interleaved=arch == "deepseek_mla")  # yarn: deepseek_yarn
        except ValueError as exc:
            raise NativeUnsupported(f"rope: {exc}") from None
        if typed_rope.theta is None:
            raise NativeUnsupported("no rope_theta stated (transformers would default it)")
        if arch != "deepseek_mla" and (typed_rope.scaling not in ROPE_KINDS or typed_rope.ignored_keys):
            raise NativeUnsupported(f"rope scaling {typed_rope.scaling!r} {typed_rope.ignored_keys or ''}".strip())
        self.num_layers = int(cfg["num_hidden_layers"])
        self.vocab_size = int(cfg["vocab_size"])
        self.hidden_size = int(cfg["hidden_size"])
        self.intermediate_size = int(cfg["intermediate_size"])
        heads = int(cfg["num_attention_heads"])
        self.spec: Any = SimpleNamespace(num_attention_heads=heads, hidden_size=self.hidden_size,
                                         num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                                         head_dim=int(cfg.get("head_dim") or self.hidden_size // heads),
                                         attention_bias=bool(cfg.get("attention_bias", False)), mla=None)
        self.moe: Moe | None = None  # DeepSeek-V3: dense below moe.first_dense, routed from there
        if arch == "deepseek_mla":
            from ..config.config_fields import MlaDims
            from .native_deepseek import DeepseekUnsupported, check_rope, read_config

            try:
                check_rope(typed_rope)
                dims, self.moe = read_config(cfg, self.num_layers)
            except DeepseekUnsupported as exc:
                raise NativeUnsupported(str(exc)) from None
            self.spec.mla, self.spec.num_key_value_heads, self.spec.head_dim = MlaDims(**dims), heads, None
        self.eps = float(cfg["rms_norm_eps"])
        self.rope = resolve_rope(typed_rope, arch, get(arch).default_rope_theta)
        self.ops = get_ops("torch", "native")
        self.architecture = get(arch)  # owns the decoder layer (Architecture.decoder_layer)
        tensors, droppers = _read_weights(self.path)
        tied = cfg.get("tie_word_embeddings", False)
        embed, head = tensors.get("embed_tokens.weight"), tensors.get("lm_head.weight")
        if tied and embed is not None and head is not None and not torch.equal(embed, head):
            # transformers 5 then keeps the stored lm_head (it warns and does not tie); vLLM ties and skips it
            raise NativeUnsupported("tie_word_embeddings with a stored lm_head.weight that differs from the embedding "
                                    "(transformers uses the stored one, vLLM the embedding)")
        if head is None:
            if not tied or embed is None:
                raise NativeUnsupported("no lm_head.weight and no tied embedding")
            tensors["lm_head.weight"] = embed
            if "embed_tokens.weight" in droppers:
                droppers["lm_head.weight"] = droppers["embed_tokens.weight"]
        self._check_tensors(tensors, arch)
        self.w = Weights(DictSource(tensors, droppers), torch.float32, width=self.hidden_size)

    def _check_tensors(self, tensors: dict[str, torch.Tensor], arch: str) -> None:
        """Every tensor present with its shape, and none left over: an unread tensor would mean other math (a bias
        the config does not declare is one: transformers would not add it).  The attention tensors are the
        architecture's own list (``attention_tensors``, as for a drafter layer of the target's width)."""
        from ..architectures import get

        H, V, inter = self.hidden_size, self.vocab_size, self.intermediate_size
        expected: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (V, H), "norm.weight": (H,),
                                                "lm_head.weight": (V, H)}
        dense = Moe(self.num_layers, 0, 0, 0, 1, 1, False, 1.0, 0)  # Llama, Qwen3: every layer's MLP SwiGLU
        for j in range(self.num_layers):
            p = f"layers.{j}."
            expected.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,)})
            expected.update(mlp_tensors(p, j, H, inter, self.moe or dense))
            expected.update({n: e.shape for n, e in get(arch).attention_tensors(self.spec, p, H).items()})
        wrong = [f"{n} {tuple(tensors[n].shape)} (expected {shape})" for n, shape in expected.items()
                 if n in tensors and tuple(tensors[n].shape) != shape]
        missing = sorted(set(expected) - set(tensors))
        extra = sorted(set(tensors) - set(expected))
        if wrong or missing or extra:
            raise NativeUnsupported("; ".join(x for x in (
                "shapes: " + ", ".join(wrong[:3]) if wrong else "",
                "missing: " + ", ".join(missing[:3]) if missing else "",
                "unread tensors: " + ", ".join(extra[:3]) if extra else "") if x))

    def to(self, device: str) -> NativeTarget:
        """Every weight moved to ``device`` (``simulate --device cuda``); the forward then runs there."""
        from .weights import DictSource, Weights

        source = self.w.source
        self.w = Weights(DictSource({n: source.raw(n).to(device) for n in source.names()}), torch.float32,
                         width=self.hidden_size, device=device)
        return self

    def pack_linears(self) -> bool:
        """From now on multiply the large weights packed for oneDNN, as vLLM's CPU backend runs its linears (a weight
        store made with ``pack=True``, over the same tensors); False where packing does not apply (forward.weights)."""
        from .weights import Weights

        self.w = Weights(self.w.source, torch.float32, width=self.hidden_size, device=self.w.device, pack=True)
        return self.w.packs

    @property
    def packed_weights(self) -> int:
        return self.w.packed_weights

    @property
    def embed(self) -> torch.Tensor:
        return self.w.source.raw("embed_tokens.weight")

    @property
    def lm_head(self) -> torch.Tensor:
        return self.w.source.raw("lm_head.weight")

    def layers(self, h: torch.Tensor, positions: torch.Tensor, cache: Callable[[int], LayerCache | None],
               capture: Mapping[int, int]) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Every decoder layer over the residual stream ``h`` [1, N, H] at ``positions`` [N], each through the
        architecture's own layer (Architecture.decoder_layer) with the cache ``cache(j)`` gives layer j (None: a
        full pass; forward.kv_cache: the slots of each prompt).  Returns the stream after the last layer (before the
        final norm) and the stream entering layer i for each ``capture`` entry i -> index (id L: the last)."""
        w, ops, eps, arch = self.w, self.ops, self.eps, self.architecture
        captured: list[torch.Tensor | None] = [None] * len(capture)
        m: torch.Tensor | None = None
        res = h
        for j in range(self.num_layers):
            p = f"layers.{j}."
            if m is None:
                u = arch.rms_norm(ops, res, w, p + "input_layernorm.weight", eps)
            else:  # the residual add of the previous layer's MLP, fused with this layer's norm, as vLLM runs it
                u, res = arch.add_rms_norm(ops, m, res, w, p + "input_layernorm.weight", eps)
            if j in capture:
                captured[capture[j]] = res[0]
            if self.moe is None or j < self.moe.first_dense:
                m, res, _ = arch.decoder_layer(u, res, positions, cache(j), w, p, self.spec, self.rope, ops, eps)
            else:  # DeepSeek-V3's routed layer: the decoder layer's attention and norms, the MoE for its MLP
                o, _ = arch.attention(u, positions, cache(j), w, p, self.spec, self.rope, ops, eps)
                h_, res = arch.add_rms_norm(ops, o, res, w, p + "post_attention_layernorm.weight", eps)
                m = moe(h_, w, p, self.moe)
        h = res if m is None else m + res
        if self.num_layers in capture:
            captured[capture[self.num_layers]] = h[0]
        return h, captured

    def forward(self, tokens: Sequence[int], layer_ids: Sequence[int]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Greedy next token after every position [T], and hidden states [T, Ht] per hidden_state_index id
        (id i: the residual stream entering layer i; id L: the stream before the final norm)."""
        w = self.w
        ids = torch.tensor([list(tokens)])
        positions = torch.arange(ids.shape[1], device=w.device)
        want = {i: n for n, i in enumerate(dict.fromkeys(layer_ids))}
        with torch.no_grad():
            h, captured = self.layers(w.embed(ids), positions, lambda j: None, want)
            logits = w.linear(self.architecture.rms_norm(self.ops, h, w, "norm.weight", self.eps), "lm_head.weight")
        states = {i: c for i, c in zip(want, captured) if c is not None}
        return logits[0].argmax(-1), states

    def run(self, prompt: Sequence[int], layer_ids: Sequence[int]) -> tuple[dict[int, torch.Tensor], int]:
        """Hidden states [T, Ht] for each hidden_state_index id, and the greedy next token (as Target.run)."""
        return run_target(self, prompt, layer_ids)


TARGET_RUNTIMES = ("auto", "eagleconv", "transformers")


def open_target(directory: str | Path, runtime: str = "auto") -> TargetModel:
    """A runnable target: ``eagleconv`` (its own Llama/Qwen3/DeepSeek-V3 forward, no transformers import), ``transformers``,
    or ``auto`` (eagleconv where it runs the config exactly, else transformers; ``.fallback`` says why)."""
    if runtime not in TARGET_RUNTIMES:
        raise UsageError(f"unknown target runtime {runtime!r}; choose one of {', '.join(TARGET_RUNTIMES)}")
    fallback = None
    if runtime != "transformers":
        try:
            return NativeTarget(directory)
        except NativeUnsupported as exc:
            if runtime == "eagleconv":
                raise UsageError(f"{directory}: eagleconv cannot run this target itself ({exc}); "
                                 "use --target-runtime transformers") from None
            fallback = str(exc)
    target = Target(directory)
    target.fallback = fallback
    return target
