"""The reference forward against an independent float64 implementation written here.

The oracle below shares nothing with eagleconv.forward: it walks tokens, heads
and keys in plain Python loops over float64 vectors, with its own RMSNorm,
RoPE (neox, llama3, yarn, DeepSeek yarn interleaved), attention over its own
KV cache, MLA expansion and d2t scatter, following vllm-loader.md §4 directly.
Bound: float64 reference vs oracle, max |logit difference| <= 1e-9 x max |logit|,
same draft tokens at every step; float32 reference within 2e-4 relative.
"""

from __future__ import annotations

import math

import pytest
import torch

from eagleconv.spec.drafter import AuxLayers, DrafterSpec, EagleFlags, MlaDims, Rope
from eagleconv.synthetic import DrafterRecipe, TinyDims, canonical_tensors

D = TinyDims()
F64 = torch.float64


# ----------------------------------------------------------------------------- the oracle

def o_rms(x, w, eps):
    ms = sum(float(v) * float(v) for v in x) / len(x)
    r = 1.0 / math.sqrt(ms + eps)
    return torch.tensor([float(x[i]) * r * float(w[i]) for i in range(len(x))], dtype=F64)


def o_inv_freq(rope, dim):
    theta = rope["theta"]
    base = [1.0 / theta ** (2 * i / dim) for i in range(dim // 2)]
    kind = rope["kind"]
    if kind == "llama3":
        f, lo, hi, orig = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"], rope["orig"]
        out = []
        for b in base:
            wl = 2 * math.pi / b
            if wl < orig / hi:
                out.append(b)
            elif wl > orig / lo:
                out.append(b / f)
            else:
                s = (orig / wl - lo) / (hi - lo)
                out.append((1 - s) * b / f + s * b)
        return out
    if kind in ("yarn", "deepseek_yarn"):
        f, orig = rope["factor"], rope["orig"]

        def corr(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
        low = max(math.floor(corr(rope["beta_fast"])), 0)
        high = min(math.ceil(corr(rope["beta_slow"])), dim - 1)
        if low == high:
            high += 0.001
        out = []
        for i, b in enumerate(base):
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)
            keep = 1 - ramp  # extrapolation weight
            out.append((b / f) * (1 - keep) + b * keep)
        return out
    return base


def o_mscale(s, m=1.0):
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def o_rope(x, pos, rope, interleaved):
    d = len(x)
    inv = o_inv_freq(rope, d)
    scale = 1.0
    if rope["kind"] == "yarn":
        scale = o_mscale(rope["factor"])
    if rope["kind"] == "deepseek_yarn":
        scale = o_mscale(rope["factor"], rope["mscale"]) / o_mscale(rope["factor"], rope["mscale_all_dim"])
    out = [0.0] * d
    for i in range(d // 2):
        c, s = math.cos(pos * inv[i]) * scale, math.sin(pos * inv[i]) * scale
        if interleaved:
            a, b = float(x[2 * i]), float(x[2 * i + 1])
            out[2 * i], out[2 * i + 1] = a * c - b * s, b * c + a * s
        else:
            a, b = float(x[i]), float(x[i + d // 2])
            out[i], out[i + d // 2] = a * c - b * s, b * c + a * s
    return torch.tensor(out, dtype=F64)


def o_softmax_attend(q, keys, values, scale):
    scores = [float(q @ k) * scale for k in keys]
    top = max(scores)
    ex = [math.exp(s - top) for s in scores]
    z = sum(ex)
    acc = torch.zeros_like(values[0])
    for e, v in zip(ex, values):
        acc = acc + (e / z) * v
    return acc


class Oracle:
    def __init__(self, spec: DrafterSpec, t: dict[str, torch.Tensor], rope: dict):
        self.s, self.t, self.rope = spec, {k: v.to(F64) if v.is_floating_point() else v for k, v in t.items()}, rope
        self.eps = spec.rms_norm_eps
        self.kv: dict[int, list] = {}  # layer -> list of (pos, keys per head, values per head)

    def W(self, name):  # noqa: N802 - W, a weight, as in the maths it checks
        return self.t[name]

    def lin(self, x, name):
        y = self.W(name) @ x
        return y

    def combine(self, a):
        s, K, Ht = self.s, self.s.aux.count, self.s.target_hidden_size
        if s.flags.norm_before_fc and s.architecture != "deepseek_mla":
            a = o_rms(a, self.W("input_norm.weight"), self.eps)
        if s.flags.fc_norm:
            a = torch.cat([o_rms(a[i * Ht:(i + 1) * Ht], self.W(f"fc_norm.{i}.weight"), self.eps) for i in range(K)])
        return self.lin(a, "fc.weight")

    def attn(self, layer, u, pos):
        s = self.s
        p = f"layers.{layer}.self_attn."
        entries = self.kv.setdefault(layer, [])
        if s.architecture == "deepseek_mla":
            m = s.mla
            dn, dr, dv, nh = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, s.num_attention_heads
            qc = o_rms(self.lin(u, p + "q_a_proj.weight"), self.W(p + "q_a_layernorm.weight"), self.eps)
            q = self.lin(qc, p + "q_b_proj.weight")
            kvl = self.lin(u, p + "kv_a_proj_with_mqa.weight")
            kvc = o_rms(kvl[:m.kv_lora_rank], self.W(p + "kv_a_layernorm.weight"), self.eps)
            kpe = o_rope(kvl[m.kv_lora_rank:], pos, self.rope, True)
            kv = self.lin(kvc, p + "kv_b_proj.weight")
            heads_q, heads_k, heads_v = [], [], []
            for h in range(nh):
                qh = q[h * (dn + dr):(h + 1) * (dn + dr)]
                heads_q.append(torch.cat([qh[:dn], o_rope(qh[dn:], pos, self.rope, True)]))
                kvh = kv[h * (dn + dv):(h + 1) * (dn + dv)]
                heads_k.append(torch.cat([kvh[:dn], kpe]))
                heads_v.append(kvh[dn:])
            entries.append((heads_k, heads_v))
            scale = (dn + dr) ** -0.5
            if self.rope["kind"] == "deepseek_yarn":
                scale *= o_mscale(self.rope["factor"], self.rope["mscale_all_dim"]) ** 2
            outs = [o_softmax_attend(heads_q[h], [e[0][h] for e in entries], [e[1][h] for e in entries], scale)
                    for h in range(nh)]
            return self.lin(torch.cat(outs), p + "o_proj.weight")
        nh, nkv, d = s.num_attention_heads, s.num_key_value_heads, s.head_dim
        q, k, v = self.lin(u, p + "q_proj.weight"), self.lin(u, p + "k_proj.weight"), self.lin(u, p + "v_proj.weight")
        ks, vs = [], []
        for h in range(nkv):
            kh = k[h * d:(h + 1) * d]
            if s.architecture == "qwen3":
                kh = o_rms(kh, self.W(p + "k_norm.weight"), self.eps)
            ks.append(o_rope(kh, pos, self.rope, False))
            vs.append(v[h * d:(h + 1) * d])
        entries.append((ks, vs))
        outs = []
        for h in range(nh):
            qh = q[h * d:(h + 1) * d]
            if s.architecture == "qwen3":
                qh = o_rms(qh, self.W(p + "q_norm.weight"), self.eps)
            qh = o_rope(qh, pos, self.rope, False)
            g = h // (nh // nkv)
            outs.append(o_softmax_attend(qh, [e[0][g] for e in entries], [e[1][g] for e in entries], d ** -0.5))
        return self.lin(torch.cat(outs), p + "o_proj.weight")

    def row(self, token, pos, hidden):
        """One row (the KV cache makes rows sequential): returns (full logits [V], feedback [H])."""
        s = self.s
        m = res = None
        for j in range(s.num_hidden_layers):
            p = f"layers.{j}."
            if j == 0:
                e = self.W("embed_tokens.weight")[token]
                en = o_rms(e, self.W(p + "input_layernorm.weight"), self.eps)
                gn = o_rms(hidden, self.W(p + "hidden_norm.weight"), self.eps)
                res = gn if s.flags.norm_before_residual else hidden
                u = torch.cat([en, gn])
            else:
                res = m + res
                u = o_rms(res, self.W(p + "input_layernorm.weight"), self.eps)
            o = self.attn(j, u, pos)
            res = o + res
            h2 = o_rms(res, self.W(p + "post_attention_layernorm.weight"), self.eps)
            gate, up = self.lin(h2, p + "mlp.gate_proj.weight"), self.lin(h2, p + "mlp.up_proj.weight")
            act = torch.tensor([float(g) / (1 + math.exp(-float(g))) * float(u_) for g, u_ in zip(gate, up)], dtype=F64)
            m = self.lin(act, p + "mlp.down_proj.weight")
        pre = m + res
        out = o_rms(pre, self.W("norm.weight"), self.eps)
        z = self.lin(out, "lm_head.weight")
        full = [float("-inf")] * s.vocab_size
        d2t = self.t["d2t"].tolist()
        for i in range(s.draft_vocab_size):
            full[i + d2t[i]] = float(z[i])
        return torch.tensor(full, dtype=F64), (out if s.flags.norm_output else pre)

    def draft(self, tokens, aux, steps):
        """tokens [T+1], aux [T, K*Ht] for ONE sequence."""
        self.kv = {}
        T = len(tokens) - 1
        for p in range(T):
            logits, fb = self.row(int(tokens[p + 1]), p, self.combine(aux[p].to(F64)))
        toks, all_logits = [int(torch.argmax(logits))], [logits]
        for k in range(2, steps + 1):
            logits, fb = self.row(toks[-1], T - 2 + k, fb)
            toks.append(int(torch.argmax(logits)))
            all_logits.append(logits)
        return toks, all_logits


# ----------------------------------------------------------------------------- cases

ROPES = {
    "llama": ({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8}},
              {"theta": 500000.0, "kind": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "orig": 8}),
    "qwen3": ({"rope_theta": 1000000.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                         "original_max_position_embeddings": 16}},
              {"theta": 1000000.0, "kind": "yarn", "factor": 4.0, "orig": 16, "beta_fast": 32, "beta_slow": 1}),
    "deepseek_mla": ({"rope_theta": 50000.0, "rope_scaling": {"type": "yarn", "factor": 32.0,
                                                              "original_max_position_embeddings": 16, "beta_fast": 4.0,
                                                              "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.7}},
                     {"theta": 50000.0, "kind": "deepseek_yarn", "factor": 32.0, "orig": 16, "beta_fast": 4.0,
                      "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.7}),
}

FLAG_SETS = [{}, {"fc_norm": True}, {"norm_before_fc": True}, {"norm_output": True}, {"norm_before_residual": True},
             {"fc_norm": True, "norm_output": True}, {"fc_norm": True, "norm_before_fc": True, "norm_output": True,
                                                       "norm_before_residual": True}]


def make_case(arch: str, flags: dict, layers: int = 1):
    recipe = DrafterRecipe(architecture=arch, eagle31=True, norm_before_fc=True, layers=layers, dtype="float64", seed=3)
    tensors = canonical_tensors(recipe)
    stated, oracle_rope = ROPES[arch]
    spec = DrafterSpec(
        architecture=arch, model_type={"llama": "llama", "qwen3": "qwen3", "deepseek_mla": "deepseek_v3"}[arch],
        hidden_size=D.hidden, num_hidden_layers=layers, num_attention_heads=D.heads,
        num_key_value_heads=None if arch == "deepseek_mla" else D.kv_heads,
        head_dim=None if arch == "deepseek_mla" else D.head_dim, intermediate_size=D.intermediate,
        rms_norm_eps=1e-5, target_hidden_size=D.target_hidden, vocab_size=D.vocab, draft_vocab_size=D.draft_vocab,
        aux=AuxLayers(count=3, ids=D.aux_ids, convention="hidden_state_index"), flags=EagleFlags(**flags),
        embed_tokens="drafter", lm_head="drafter", dtype="F64",
        rope=Rope.from_config(stated, interleaved=arch == "deepseek_mla"),
        mla=MlaDims(q_lora_rank=D.q_lora_rank, kv_lora_rank=D.kv_lora_rank, qk_nope_head_dim=D.qk_nope_head_dim,
                    qk_rope_head_dim=D.qk_rope_head_dim, v_head_dim=D.v_head_dim) if arch == "deepseek_mla" else None)
    return spec, tensors, oracle_rope


def run_reference(spec, tensors, dtype, tokens, aux, steps, recipe="native"):
    from eagleconv.forward.model import DraftInputs, Drafter
    from eagleconv.forward.weights import DictSource

    drafter = Drafter(spec, DictSource(tensors), dtype=dtype, recipe=recipe)
    return drafter.draft(DraftInputs(tokens, aux), steps=steps)


def inputs(seed=0, batch=2, length=6):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, D.vocab, (batch, length + 1), generator=g)
    aux = torch.randn(batch, length, 3 * D.target_hidden, generator=g, dtype=F64) * 3
    return tokens, aux


@pytest.mark.parametrize("arch", ["llama", "qwen3", "deepseek_mla"])
@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: "+".join(f) or "eagle3")
def test_reference_matches_independent_float64(arch, flags):
    spec, tensors, oracle_rope = make_case(arch, flags)
    tokens, aux = inputs()
    steps = 4
    ref = run_reference(spec, tensors, "float64", tokens, aux, steps)
    for b in range(tokens.shape[0]):
        toks, logits = Oracle(spec, tensors, oracle_rope).draft(tokens[b], aux[b], steps)
        assert [int(t[b]) for t in ref.tokens] == toks
        for k in range(steps):
            mine, theirs = ref.logits[k][b], logits[k]
            finite = torch.isfinite(theirs)
            assert torch.equal(torch.isfinite(mine), finite)
            err = float((mine[finite] - theirs[finite]).abs().max())
            assert err <= 1e-9 * float(theirs[finite].abs().max())


def test_two_layers_and_float32_within_bound():
    for arch in ("llama", "deepseek_mla"):
        spec, tensors, oracle_rope = make_case(arch, {"fc_norm": True, "norm_output": True}, layers=2)
        tokens, aux = inputs(seed=1, batch=1, length=5)
        toks, logits = Oracle(spec, tensors, oracle_rope).draft(tokens[0], aux[0], 3)
        ref64 = run_reference(spec, tensors, "float64", tokens, aux, 3)
        ref32 = run_reference(spec, tensors, "float32", tokens, aux, 3)
        assert [int(t[0]) for t in ref64.tokens] == toks
        for k in range(3):
            finite = torch.isfinite(logits[k])
            scale = float(logits[k][finite].abs().max())
            assert float((ref64.logits[k][0][finite] - logits[k][finite]).abs().max()) <= 1e-9 * scale
            assert float((ref32.logits[k][0].double()[finite] - logits[k][finite]).abs().max()) <= 2e-4 * scale


def test_flags_change_the_function():
    """Each flag must actually change the output (a flag silently ignored is the bug class we look for)."""
    tokens, aux = inputs(seed=2)
    for arch in ("llama", "qwen3", "deepseek_mla"):
        base_spec, tensors, _ = make_case(arch, {})
        base = run_reference(base_spec, tensors, "float64", tokens, aux, 3)
        names = ["fc_norm", "norm_output", "norm_before_residual"] + ([] if arch == "deepseek_mla" else ["norm_before_fc"])
        for flag in names:
            spec, _, _ = make_case(arch, {flag: True})
            other = run_reference(spec, tensors, "float64", tokens, aux, 3)
            diff = max(float((a[torch.isfinite(a)] - b[torch.isfinite(b)]).abs().max())
                       for a, b in zip(base.logits[1:], other.logits[1:]))
            assert diff > 1e-6, (arch, flag)


def test_bf16_recipes_differ_only_at_rounding_level():
    spec, tensors, _ = make_case("llama", {"fc_norm": True, "norm_output": True})
    spec = spec.model_copy(update={"dtype": "BF16"})
    bf = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in tensors.items()}
    tokens, aux = inputs(seed=4)
    native = run_reference(spec, bf, "checkpoint", tokens, aux, 2, recipe="native")
    one = run_reference(spec, bf, "checkpoint", tokens, aux, 2, recipe="one_round")
    exact = run_reference(spec, tensors, "float64", tokens, aux, 2)
    assert native.logits[0].dtype == torch.bfloat16
    a, b, x = native.first_pass_logits, one.first_pass_logits, exact.first_pass_logits
    finite = torch.isfinite(x)
    assert not torch.equal(a, b)  # the recipes are really different code paths in bf16
    scale = float(x[finite].abs().max())
    assert float((a[finite].double() - x[finite]).abs().max()) < 0.1 * scale
    assert float((b[finite].double() - x[finite]).abs().max()) < 0.1 * scale
