"""``eagleconv simulate``: greedy speculative decoding offline, counted the way vLLM counts it.

The target runs in transformers; the drafter runs as the engine profile reads it (flags as the profile resolves
them, aux layers as vLLM's V1 runner captures them, tensors as its loader renames, drops, defaults or shares
them), with vLLM's drafter math (vLLM 0.32.0: vllm/model_executor/models/llama_eagle3.py) and its proposer
semantics (vllm/v1/spec_decode/llm_base_proposer.py):

* prefill: the target samples x_P; the drafter's first pass sees row p = (token x_{p+1}, position p, hidden
  combine(aux_p)) for every prompt position, the last row carrying the sampled token;
* each draft step k >= 2 feeds back the previous step's pre-norm state (post-norm with norm_output), one row at
  position T-2+k, attending to the first pass's rows and the earlier steps of this round;
* verification: the target scores [last token, d_1..d_K]; the longest prefix equal to its greedy tokens is
  accepted, plus one bonus token; rejected drafts leave nothing behind (their KV slots are overwritten before
  anything reads them), so every round is equivalent to a fresh first pass over all verified rows;
* counters as vLLM's: every verification round is one draft of K tokens (including the last round, whose
  tokens past max_tokens are cut), ignore_eos.

The generated tokens are the target's plain greedy output whatever the drafter does; only the counters and the
drafted tokens depend on it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import EagleconvError

DEFAULT_PROMPTS: tuple[tuple[int, ...], ...] = ((1, 17, 42, 99, 7, 300), (1, 5, 5, 64, 128), (1, 250, 3, 77, 31, 2, 9),
                                                (1, 400, 401, 402))


class SimulateReport(BaseModel):
    """What ``eagleconv simulate --json`` prints; counters mean what vLLM's ``vllm:spec_decode_*`` mean."""

    model_config = ConfigDict(defer_build=True)

    tokens: list[list[int]] = Field(description="generated tokens per prompt (the target's greedy output)")
    num_drafts: int = Field(description="verification rounds that carried drafts (vllm:spec_decode_num_drafts)")
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: list[int]
    acceptance_length: float = Field(description="1 + accepted / drafts, as vLLM's acceptance tests compute it")
    drafts: list[list[list[int]]] = Field(description="every proposal per prompt, K tokens each, including the "
                                                      "one made after the last round (vLLM drafts it too)")
    engine: str
    num_speculative_tokens: int
    max_tokens: int
    notes: list[str] = Field(default_factory=list)


class SimulateError(EagleconvError):
    """The engine would not run this drafter (it fails at load or in its first step); the message says why."""


@dataclass(kw_only=True)
class EngineDrafter:
    """The drafter's weights and settings exactly as vLLM will hold them (float32)."""

    weights: dict[str, Any]
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    theta: float
    aux_count: int
    capture: tuple[int, ...]  # target layers captured, ascending and deduplicated (set membership in the runner)
    flags: dict[str, bool]
    draft_vocab: int
    vocab: int
    logit_scale: float
    notes: list[str]


def _load_tensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise SimulateError(f"{path}: no *.safetensors file (simulate reads safetensors only)", code=None)
    out: dict[str, Any] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def engine_drafter(drafter: str | Path, engine: str, target_config: Mapping[str, Any],
                   target_weights: Mapping[str, Any]) -> EngineDrafter:
    """Read ``drafter`` the way ``engine``'s loader does (vLLM 0.32 rules, V1 runner); raise where it raises."""
    import torch

    from .engines import engine_view, resolve_engines
    from .engines.base import Subject
    from .formats import detect_layout
    from .formats.base import read_drafter
    from .io.reader import open_checkpoint

    profiles = resolve_engines([engine])
    profile = profiles[0]
    if profile.engine != "vllm":
        raise SimulateError(f"simulate models vLLM's proposer only, not {profile.label}", code=None)
    path = Path(drafter)
    with open_checkpoint(path) as store:
        config = dict(store.config or {})
        layout, _ = detect_layout(config, set(store.tensors), {}, "safetensors", str(path))
        read = read_drafter(layout, config, store.tensors)
        view = engine_view(profile, Subject(config, layout=layout, read=read, names=set(store.tensors),
                                                     has_tensors=True, path=str(path)))
    if view.problems:
        raise SimulateError(f"{path}: {profile.label} fails reading the config: {view.problems[0]}", code=None)
    if view.cls is None:
        raise SimulateError(f"{path}: {profile.label} has no drafter class for architectures "
                            f"{config.get('architectures')}", code=None)
    if view.cls.family != "llama":
        raise SimulateError(f"{path}: simulate runs the Llama drafter class only, not {view.cls.name}", code=None)
    cfg, flags = view.config, {k: v for k, (v, _) in view.flags.items()}
    notes: list[str] = []

    def need(key: str) -> Any:
        if key not in cfg or cfg[key] is None:
            raise SimulateError(f"{path}: {profile.label} reads {key!r} from the config, which has none", code=None)
        return cfg[key]

    H, heads, layers = int(need("hidden_size")), int(need("num_attention_heads")), int(need("num_hidden_layers"))
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or H // heads)
    vocab = int(need("vocab_size"))
    draft_vocab = int(cfg.get("draft_vocab_size") or vocab)
    Ht = int(cfg.get("target_hidden_size") or H)
    eps = float(cfg["rms_norm_eps"]) if cfg.get("rms_norm_eps") is not None else 1e-6
    rope = cfg.get("rope_parameters") or {}
    theta = float(cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0)
    if (cfg.get("rope_scaling") or {}).get("rope_type", "default") not in ("default", None):
        raise SimulateError(f"{path}: simulate supports default RoPE only", code=None)
    K = view.aux_count or 3
    target_layers = int(target_config["num_hidden_layers"])

    # Target layers captured by vLLM 0.32's V1 runner (gpu_model_runner.py): top-level ids, then
    # eagle_config.eagle_aux_hidden_state_layer_ids, then (2, L//2, L-3); capture is set membership, in layer order.
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    source = "eagle_aux_hidden_state_layer_ids"
    if not ids:
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        source = "eagle_config.eagle_aux_hidden_state_layer_ids (read by the V1 runner only)"
    if not ids:
        ids = list(profile.capture.default_ids(target_layers)) if profile.capture.default_ids else [2]
        source = f"the default {profile.capture.default} with L={target_layers}"
        notes.append(f"aux layers: no ids in the config, vLLM captures {ids}")
    capture = tuple(sorted({int(i) for i in ids if 0 <= int(i) <= target_layers}))
    if len(capture) != K:
        raise SimulateError(f"{path}: vLLM captures {len(capture)} target hidden states (layers {list(capture)} from "
                            f"{source}) but builds fc for {K} ({view.aux_count_source}): the first request fails in "
                            f"combine_hidden_states", code=None)

    # The loader (llama_eagle3.py load_weights + AutoWeightsLoader): t2d dropped, d2t renamed, model. added.
    raw = _load_tensors(path)
    expected: dict[str, tuple[int, ...]] = {"fc.weight": (H, K * Ht), "norm.weight": (H,), "embed_tokens.weight": (vocab, H),
                                            "lm_head.weight": (draft_vocab, H)}
    if flags.get("norm_before_fc"):
        expected["input_norm.weight"] = (K * Ht,)
    if flags.get("fc_norm"):
        expected.update({f"fc_norm.{i}.weight": (Ht,) for i in range(K)})
    inter = int(need("intermediate_size"))
    for j in range(layers):
        width = 2 * H if j == 0 else H
        p = f"layers.{j}."
        expected.update({
            p + "self_attn.q_proj.weight": (heads * head_dim, width), p + "self_attn.k_proj.weight": (kv_heads * head_dim, width),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, width), p + "self_attn.o_proj.weight": (H, heads * head_dim),
            p + "mlp.gate_proj.weight": (inter, H), p + "mlp.up_proj.weight": (inter, H), p + "mlp.down_proj.weight": (H, inter),
            p + "input_layernorm.weight": (H,), p + "hidden_norm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
        })
    if draft_vocab != vocab:
        expected["d2t"] = (draft_vocab,)
    weights: dict[str, Any] = {}
    for name, tensor in raw.items():
        if "t2d" in name:
            continue
        if "mask_hidden" in name:
            continue
        canon = name.replace("midlayer.", "layers.0.", 1)
        if not flags.get("norm_before_fc") and canon.startswith("input_norm."):
            continue
        if any(s in canon for s in ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached",
                                    "rotary_pos_emb.inv_freq")):
            continue
        if canon not in expected:
            if canon.endswith(".bias") and canon[: -len(".bias")] + ".weight" in expected:
                continue
            first = canon.split(".")[0] if not canon.startswith("layers.") else ".".join(canon.split(".")[:3])
            raise SimulateError(f"{path}: vLLM fails at load: ValueError: There is no module or parameter named "
                                f"{first!r} (tensor {name})", code=None)
        if tuple(tensor.shape) != expected[canon]:
            raise SimulateError(f"{path}: vLLM fails at load: AssertionError: {name} is {list(tensor.shape)}, the "
                                f"parameter is {list(expected[canon])}", code=None)
        weights[canon] = tensor.to(torch.int64 if canon == "d2t" else torch.float32)
    for name in expected:
        if name in weights:
            continue
        if "norm" in name:
            weights[name] = torch.ones(expected[name])
            notes.append(f"{name} missing: vLLM keeps its initial weight 1.0, and so does simulate")
        elif name == "d2t":
            weights[name] = torch.zeros(draft_vocab, dtype=torch.int64)
            notes.append("d2t missing: vLLM keeps an all-zero offset vector (draft id i = target id i)")
        elif name == "embed_tokens.weight":
            weights[name] = target_weights["embed"]
        elif name == "lm_head.weight":
            weights[name] = target_weights["lm_head"][:draft_vocab]
            if draft_vocab != vocab:
                notes.append(f"lm_head missing with draft vocab {draft_vocab} < vocab {vocab}: vLLM shares the "
                             f"target's lm_head and keeps its first {draft_vocab} logits")
        else:
            raise SimulateError(f"{path}: {name} is missing; vLLM leaves it uninitialised (torch.empty) and reports "
                                f"nothing, so what it drafts cannot be predicted", code=None)
    if "embed_tokens.weight" in raw and torch.equal(raw["embed_tokens.weight"].float(), target_weights["embed"]):
        weights["embed_tokens.weight"] = target_weights["embed"]
    return EngineDrafter(weights=weights, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim, eps=eps,
                         theta=theta, aux_count=K, capture=capture, flags=flags, draft_vocab=draft_vocab, vocab=vocab,
                         logit_scale=float(cfg.get("logit_scale") or 1.0), notes=notes)


def _rms(x: Any, w: Any, eps: float) -> Any:
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: Any, pos: Any, theta: float, head_dim: int) -> Any:
    import torch

    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = pos.float()[:, None] * inv
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class DraftRunner:
    """One request's drafter: a first pass over all verified rows, then K-1 recursive steps (vLLM's proposer)."""

    def __init__(self, d: EngineDrafter):
        self.d = d

    def combine(self, aux: Any) -> Any:
        import torch

        d, w = self.d, self.d.weights
        if not d.flags.get("use_aux_hidden_state", True):
            return aux
        if d.flags.get("norm_before_fc"):
            aux = _rms(aux, w["input_norm.weight"], d.eps)
        if d.flags.get("fc_norm"):
            aux = torch.cat([_rms(c, w[f"fc_norm.{i}.weight"], d.eps)
                             for i, c in enumerate(aux.chunk(d.aux_count, -1))], -1)
        return aux @ w["fc.weight"].T

    def _layers(self, ids: Any, pos: Any, hidden: Any, cache: list[tuple[Any, Any]]) -> tuple[Any, Any]:
        import torch
        import torch.nn.functional as F

        d, w = self.d, self.d.weights
        rep = d.heads // d.kv_heads
        x: Any = None
        residual: Any = None
        for j in range(d.layers):
            p = f"layers.{j}."
            if j == 0:
                en = _rms(w["embed_tokens.weight"][ids], w[p + "input_layernorm.weight"], d.eps)
                gn = _rms(hidden, w[p + "hidden_norm.weight"], d.eps)
                residual = gn if d.flags.get("norm_before_residual") else hidden
                u = torch.cat([en, gn], -1)
            else:
                residual = x + residual
                u = _rms(residual, w[p + "input_layernorm.weight"], d.eps)
            n = u.shape[0]
            q = _rope((u @ w[p + "self_attn.q_proj.weight"].T).view(n, d.heads, d.head_dim), pos, d.theta, d.head_dim)
            k = _rope((u @ w[p + "self_attn.k_proj.weight"].T).view(n, d.kv_heads, d.head_dim), pos, d.theta, d.head_dim)
            v = (u @ w[p + "self_attn.v_proj.weight"].T).view(n, d.kv_heads, d.head_dim)
            if len(cache) <= j:
                cache.append((k, v))
            else:
                cache[j] = (torch.cat([cache[j][0], k]), torch.cat([cache[j][1], v]))
            K_, V_ = cache[j][0].repeat_interleave(rep, 1), cache[j][1].repeat_interleave(rep, 1)
            s = torch.einsum("qhd,khd->hqk", q, K_) * d.head_dim ** -0.5
            total = K_.shape[0]
            mask = torch.arange(total)[None, :] <= (torch.arange(n) + total - n)[:, None]
            a = torch.einsum("hqk,khd->qhd", s.masked_fill(~mask, float("-inf")).softmax(-1), V_)
            o = a.reshape(n, d.heads * d.head_dim) @ w[p + "self_attn.o_proj.weight"].T
            residual = o + residual
            h2 = _rms(residual, w[p + "post_attention_layernorm.weight"], d.eps)
            x = (F.silu(h2 @ w[p + "mlp.gate_proj.weight"].T) * (h2 @ w[p + "mlp.up_proj.weight"].T)) \
                @ w[p + "mlp.down_proj.weight"].T
        pre = x + residual
        out = _rms(pre, w["norm.weight"], d.eps)
        return out, (out if d.flags.get("norm_output") else pre)

    def _token(self, out: Any) -> int:
        import torch

        d, w = self.d, self.d.weights
        z = out @ w["lm_head.weight"].T * d.logit_scale
        full = torch.full((d.vocab,), float("-inf"))
        full[torch.arange(d.draft_vocab) + w["d2t"]] = z
        return int(full.argmax())

    def propose(self, tokens: Sequence[int], aux: Any, k: int) -> list[int]:
        """``tokens``: every verified token (prompt + output); ``aux``: the target's captured states for all but the last."""
        import torch

        T = len(tokens) - 1
        ids = torch.tensor(tokens[1:])
        cache: list[tuple[Any, Any]] = []
        out, fb = self._layers(ids, torch.arange(T), self.combine(aux[:T]), cache)
        drafts = [self._token(out[-1])]
        hidden = fb[-1:]
        for step in range(2, k + 1):
            out, fb = self._layers(torch.tensor(drafts[-1:]), torch.tensor([T - 2 + step]), hidden, cache)
            drafts.append(self._token(out[-1]))
            hidden = fb[-1:]
        return drafts


def _target(target: str | Path) -> tuple[Any, dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(target)
    if not (path / "config.json").is_file():
        raise SimulateError(f"{path}: no config.json (--target takes a Hugging Face model directory)", code=None)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    return model, json.loads((path / "config.json").read_text())


def load_prompts(path: str | Path | None) -> list[list[int]]:
    if path is None:
        return [list(p) for p in DEFAULT_PROMPTS]
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SimulateError(f"{path}: cannot read the prompts ({exc})", code=None) from None
    if not (isinstance(data, list) and data and all(isinstance(p, list) and p and
                                                    all(isinstance(t, int) and not isinstance(t, bool) for t in p)
                                                    for p in data)):
        raise SimulateError(f"{path}: prompts must be a JSON list of non-empty token-id lists", code=None)
    return data


def simulate(drafter: str | Path, target: str | Path, prompts: Sequence[Sequence[int]] | None = None, *,
             num_speculative_tokens: int = 3, max_tokens: int = 32, engine: str = "vllm:0.32") -> SimulateReport:
    """Greedy speculative decoding of ``prompts`` with ``target`` verifying ``drafter``'s proposals, as vLLM runs it."""
    import torch

    if num_speculative_tokens < 1 or max_tokens < 1:
        raise SimulateError("--num-speculative-tokens and --max-tokens must be at least 1", code=None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one request at a time of small matrices: extra threads only contend
    try:
        return _simulate(drafter, target, prompts, num_speculative_tokens, max_tokens, engine)
    finally:
        torch.set_num_threads(threads)


def _simulate(drafter: str | Path, target: str | Path, prompts: Sequence[Sequence[int]] | None,
              num_speculative_tokens: int, max_tokens: int, engine: str) -> SimulateReport:
    import torch

    model, tcfg = _target(target)
    vocab = int(tcfg["vocab_size"])
    prompts = [list(p) for p in (prompts if prompts is not None else DEFAULT_PROMPTS)]
    for p in prompts:
        if any(not 0 <= t < vocab for t in p):
            raise SimulateError(f"a prompt token is outside the target's vocabulary of {vocab}", code=None)
    emb = model.get_input_embeddings().weight.detach().float()
    head = model.get_output_embeddings().weight.detach().float()
    d = engine_drafter(drafter, engine, tcfg, {"embed": emb, "lm_head": head})
    runner = DraftRunner(d)
    K = num_speculative_tokens
    per_pos = [0] * K
    num_drafts = accepted_total = 0
    all_tokens, all_drafts = [], []
    with torch.no_grad():
        for prompt in prompts:
            seq = list(prompt)

            def target_pass(s: list[int]) -> tuple[Any, Any]:
                o = model(torch.tensor([s]), output_hidden_states=True)
                aux = torch.cat([o.hidden_states[i][0] for i in d.capture], -1)
                return o.logits[0].argmax(-1), aux

            greedy, aux = target_pass(seq)
            seq.append(int(greedy[-1]))
            out_len = 1
            drafts_here = []
            while True:
                drafts = runner.propose(seq, aux, K)
                drafts_here.append(drafts)
                if out_len >= max_tokens:
                    break
                greedy, aux_full = target_pass(seq + drafts)
                n = len(seq)
                accepted = 0
                while accepted < K and drafts[accepted] == int(greedy[n - 1 + accepted]):
                    accepted += 1
                num_drafts += 1
                accepted_total += accepted
                for i in range(accepted):
                    per_pos[i] += 1
                seq = seq + drafts[:accepted] + [int(greedy[n - 1 + accepted])]
                aux = aux_full[: len(seq) - 1]
                out_len += accepted + 1
            all_tokens.append(seq[len(prompt):][:max_tokens])
            all_drafts.append(drafts_here)
    return SimulateReport(
        tokens=all_tokens, num_drafts=num_drafts, num_draft_tokens=num_drafts * K,
        num_accepted_tokens=accepted_total, accepted_per_position=per_pos,
        acceptance_length=1 + accepted_total / num_drafts if num_drafts else math.nan,
        drafts=all_drafts, engine=engine, num_speculative_tokens=K, max_tokens=max_tokens,
        notes=[*d.notes, "aux layers captured as vLLM's V1 runner does: " + str(list(d.capture))],
    )
