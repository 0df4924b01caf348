"""Does regularisation close the SmolLM2 eagle3 drafter's train/unseen gap?  AdamW weight decay, or uniform noise on
the captured target states (EAGLE-1's augmentation, scaled by each chunk's RMS), at a fixed half budget; teacher-
forced chain accuracy on 48 training prompts and on 48 unseen ones.  Not run by CI (~3 min of generation, cached
under $CACHE (default /tmp), then ~4 min per variant on 2 cores).

    NTR=320 ITERS=384 python benchmarks/smollm2_regularisation.py wd=0.0 wd=0.1 noise=0.1   # RESULTS.md's run

The target is read from /work/smol/asm/target (fixtures/smollm2/build.py's output; PAIR to change it).
"""
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "smollm2"))
import build, train
import torch, torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(2)
spec = dataclasses.replace(build.SMOL, train_iters=int(os.environ.get("ITERS", 384)))
NTR = int(os.environ.get("NTR", 320))
cache = os.path.join(os.environ.get("CACHE", "/tmp"), f"smollm2_regularisation_rows_{NTR}.pt")
out = os.environ.get("PAIR", "/work/smol/asm")
if not os.path.exists(cache):
    target = AutoModelForCausalLM.from_pretrained(out + "/target", dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(out + "/target")
    qs = build.questions(build.stdlib_docs())
    unseen = build.N_TRAIN + build.N_CANDIDATES
    pr = [build.chat_ids(tok, q) for q in qs[:NTR] + qs[unseen:unseen + 48]]
    t0 = time.monotonic()
    with torch.no_grad():
        rows = build.generate(target, pr, spec, build.GEN_TOKENS, spec.eos_token_id, build.GEN_BATCH, log=lambda m: None)
    print("gen", time.monotonic() - t0, flush=True)
    torch.save({"rows": rows, "lens": [len(p) for p in pr], "embed": target.model.embed_tokens.weight.detach(),
                "lm": target.lm_head.weight.detach()}, cache)
d = torch.load(cache)
rows, lens, embed = d["rows"], d["lens"], d["embed"]
tokens, aux, labels = build.pad_right(rows[:NTR], spec, spec.eos_token_id)
pl = torch.tensor(lens[:NTR])
d2t, t2d, t2d_index = train.draft_vocab(labels, spec.vocab, spec.draft_vocab)
ids = torch.nonzero(t2d).flatten()
ht, ha, hl = build.pad_right(rows[NTR:], spec, spec.eos_token_id)
hpl = torch.tensor(lens[NTR:])
tt, ta, tl = tokens[:48], aux[:48], labels[:48]

def run(name, wd=0.0, noise=0.0):
    g = torch.Generator().manual_seed(spec.seed + 3)
    p = train.init_drafter(False, g, spec)
    with torch.no_grad():
        p["lm_head.weight"].copy_(d["lm"][ids])
    p["lm_head.weight"].requires_grad_(False)
    opt = torch.optim.AdamW([v for k, v in p.items() if k != "lm_head.weight"], lr=spec.lr, weight_decay=wd)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, spec.train_iters)
    N, L = tokens.shape; T1 = L - spec.ttt_steps; r = torch.arange(T1)
    t0 = time.monotonic()
    for it in range(spec.train_iters):
        idx = torch.randint(0, N, (spec.batch,), generator=g)
        a = aux[idx]
        if noise:
            chunks = a.chunk(3, -1)
            a = torch.cat([c + (torch.rand(c.shape, generator=g) * 2 - 1) * noise * c.pow(2).mean(-1, keepdim=True).sqrt() for c in chunks], -1)
        logits = train.ttt_forward(p, embed, a, tokens[idx], False, spec.ttt_steps, spec)
        loss = torch.zeros(())
        for k, lg in enumerate(logits, start=1):
            tgt = t2d_index[labels[idx][:, k:k + T1]]
            valid = (tgt >= 0) & (train.response_rows(r, pl, idx) if k > 1 else torch.ones(T1, dtype=torch.bool))
            loss = loss + F.cross_entropy(lg[valid], tgt[valid]) / k
        opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    p = {k: v.detach() for k, v in p.items()}
    a_tr = train.position0_acceptance(p, embed, ta, tt, tl, False, pl[:48], t2d_index, spec)
    a_ho = train.position0_acceptance(p, embed, ha, ht, hl, False, hpl, t2d_index, spec)
    print(f"{name}: train {[f'{x:.1%}' for x in a_tr]} unseen {[f'{x:.1%}' for x in a_ho]} ({time.monotonic()-t0:.0f} s)", flush=True)

for v in sys.argv[1:]:
    kind, val = v.split("=")
    run(v, **{kind: float(val)})
