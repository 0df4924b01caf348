"""The catalog of finding codes.  Codes are stable: never renumber, only add.

The findings reference (``FINDINGS.md`` beside this file, and ``eagleconv
findings``) is generated from this table, and a test keeps them in sync.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    """One finding code.  ``severity`` states the policy: when it is an error, when less."""

    code: str
    title: str
    explanation: str
    severity: str = "error"


CODES: dict[str, Code] = {c.code: c for c in sorted([
    Code("EC001", "duplicate JSON key",
         "A JSON file (config, index, safetensors header) has a duplicate key. Parsers disagree on which value "
         "wins (Python keeps the last, others the first), so the file means different things to different tools.",
         severity='error (the file means different things to different tools)'),
    Code("EC002", "not an EAGLE-3-family drafter",
         "The checkpoint is an EAGLE-1/EAGLE-2 drafter or unrecognisable as any EAGLE-3 layout.",
         severity='error (nothing else is checked)'),
    Code("EC003", "unmapped or misplaced tensor",
         "A tensor name matches no rule of the checkpoint's layout, two names map to the same tensor, or a name "
         "from another layout is mixed in. Engines either refuse it or silently ignore it.",
         severity='error when the engine raises on the name; warning when it silently ignores it; info when the '
                  "layout's own loader renames it first (vLLM: midlayer. -> layers.0.) and runs it as stated"),
    Code("EC004", "shape-bearing field missing",
         "A field that determines tensor shapes (hidden size, heads, head dim, vocab sizes, aux count) is absent "
         "from the config and cannot be derived exactly from the tensors. Engines would guess it.",
         severity='error'),
    Code("EC005", "invalid config value",
         "A config value has the wrong type or an impossible value (e.g. draft_vocab_size > vocab_size).",
         severity='error'),
    Code("EC006", "config key no reader uses",
         "A config key that neither eagleconv's reader of the layout nor any engine it profiles reads, and that is "
         "not a known harmless extra (transformers' bookkeeping, a trainer's own keys). A misspelt key reads as "
         "absent, so the reader silently uses its default (transformers' AutoConfig: hidden_size 4096). The "
         "finding names the closest known key (\"did you mean\").",
         severity="error when the key it is close to changes the drafter's math (EAGLE-3.1 flags, dims, RoPE, eps, "
                  "aux ids) and is absent; warning otherwise"),
    Code("EC010", "aux layer ids absent",
         "The config does not say which target layers feed the drafter, so the engine guesses "
         "(vLLM: (2, L//2, L-3)). A wrong guess silently collapses acceptance.",
         severity="warning (the guess may be right: it matches SafeAILab's hard-coded layers, not most trainers')"),
    Code("EC011", "aux hidden state count mismatch",
         "The number of aux hidden states the checkpoint was trained with differs from the count the engine "
         "will build fc for, so loading fails or the engine feeds the wrong number of states.",
         severity='error'),
    Code("EC012", "aux layer id numbering differs from the engine's",
         "The checkpoint numbers its aux layers in one convention (e.g. SpecForge's output-of-layer ids) and the "
         "engine reads them in another, so it captures target states one layer off. Loads fine; acceptance drops.",
         severity="error when every runner of the engine reads the ids; warning when only some runners do"),
    Code("EC013", "aux layer ids out of range for the target",
         "An aux id (in the engine's numbering) is negative or beyond the target's layer count (--target), so the "
         "engine captures fewer hidden states than fc expects."),
    Code("EC020", "conflicting norm flags",
         "norm_before_fc and fc_norm are both set; they are mutually exclusive.",
         severity='error'),
    Code("EC021", "EAGLE-3.1 norm flag and tensors disagree",
         "Norm tensors are present without their flag (vLLM raises at load), or a flag is set without its "
         "tensors (vLLM silently keeps weight 1.0).",
         severity='error'),
    Code("EC022", "engine reads a flag differently from the checkpoint",
         "The engine does not see a flag the checkpoint states (it reads another path, or drops it), or fills an "
         "absent flag with a default other than the trainer's. No tensors are involved, so nothing fails: the "
         "drafter silently runs different math (norm_output, norm_before_residual).",
         severity="error when the checkpoint states the flag; warning when the flag is absent and defaults differ"),
    Code("EC023", "flag semantics depend on the trainer's version",
         "The flag is read the same way everywhere, but the trainer that wrote it meant something else by it "
         "(SpecForge before PR #879: norm_output true = plain EAGLE-3 feedback), or the trainer's defaults "
         "differ from what users expect (speculators trains eagle3 with norm_before_fc + norm_output).",
         severity="warning or info"),
    Code("EC024", "readers see different RoPE",
         "The config states RoPE in one spelling only some readers read (rope_parameters alone: transformers 4.x "
         "and older engines read rope_theta and fall back to 10000), or states both spellings with different "
         "values, so the drafter runs with a different rotary base or scaling depending on who loads it; or an MLA "
         "drafter states rope_interleave false, which transformers reads (NeoX halves) and vLLM does not (pairs).",
         severity="warning (error when the two spellings disagree)"),
    Code("EC030", "invalid vocab mapping",
         "d2t/t2d are inconsistent: wrong length, absolute instead of offset ids, out of range, duplicates, "
         "disagreement with t2d, or a compressed vocab without a usable mapping.",
         severity='error'),
    Code("EC040", "engine cannot load the architecture as intended",
         "The engine does not recognise this architecture/model_type as the drafter class it needs.",
         severity="error when the engine's registry is known to lack the name; warning when eagleconv's copy of the "
                  "registry is partial, or where the engine ran it although its code says otherwise (vLLM: kimi_k2 MLA)"),
    Code("EC041", "serving method is auto-detected wrongly",
         "The engine picks the speculative method from the model path; for this path it picks the wrong one "
         "(vLLM: a path containing 'eagle-' is served as EAGLE-1; one with neither 'eagle-' nor 'eagle3' as a "
         "standalone 'draft_model'). Pass the method explicitly.",
         severity="warning for 'eagle-'; info for a path without 'eagle3' (most launch commands name the method)"),
    Code("EC043", "loader needs a verifier the config does not name",
         "speculators' SpeculatorModel.from_pretrained reads speculators_config.verifier.name_or_path and calls "
         "AutoConfig.from_pretrained on it, so a config whose name_or_path is null cannot be loaded there. "
         "Convert with --verifier NAME_OR_PATH.",
         severity="error for the speculators loader; warning on a converted output"),
    Code("EC042", "engine replaces a drafter tensor with the target's",
         "The engine shares embed_tokens or lm_head from the target (because the checkpoint has none, or "
         "unconditionally). Correct only if the drafter was trained with the target's tensor.",
         severity="info; warning when the drafter ships its own tensor that the engine discards"),
    Code("EC050", "tensor shape contradicts the config",
         "A tensor's shape differs from what the config implies, or a required tensor is missing.",
         severity='error; warning for a tensor the architecture does not use, or fewer layers declared than present'),
    Code("EC060", "non-finite weights",
         "A tensor contains NaN or Inf.",
         severity='error'),
    Code("EC051", "tensor parallelism cannot shard this drafter",
         "With --tp N, a dimension the engine splits across ranks (attention heads, KV heads, MLP width) is not "
         "divisible as the engine requires, or (a library caller's tp=) N is below 1. The vocabulary is padded, not "
         "split exactly, and is reported as info.",
         severity="error; info for vocabulary padding"),
    Code("EC052", "drafter contradicts the target model, or the engine cannot load the target",
         "The drafter's target hidden size or vocabulary differs from the target model's config.json (--target), "
         "or the drafter shares the target's embedding at a different width; or the engine cannot load the target "
         "as saved (vLLM: a DeepSeek MoE target's e_score_correction_bias without topk_method noaux_tc).",
         severity="error"),
    Code("EC053", "weight stored as integers",
         "A weight or bias (fc, a norm, a projection, lm_head, embed_tokens) is stored as an integer or BOOL dtype. "
         "Engines copy it into their float parameter without complaint, so the drafter loads and runs the integers "
         "as weights: a quantised tensor saved without its scales, or the wrong tensor.",
         severity="error"),
    Code("EC070", "non-finite forward pass",
         "validate --forward: running the drafter (vLLM's math, reference forward) produces NaN or Inf logits or "
         "fed-back hidden states at some draft step. The drafter loads and proposes garbage.",
         severity="error"),
    Code("EC071", "forward pass not run",
         "validate --forward: a tensor the reference forward reads is missing, has another shape than the config "
         "implies, or d2t/t2d map draft ids outside the vocabulary, so the drafter cannot be run at all. One "
         "finding per tensor; the structural findings (EC050, EC030) say the same about the checkpoint.",
         severity="error"),
    Code("EC061", "all-zero weights",
         "fc or lm_head is entirely zero: an uninitialised or wiped tensor. The drafter loads and proposes "
         "garbage.", severity="warning"),
    Code("EC062", "norm weight statistics",
         "Mean, min and max of each RMSNorm weight. All-exactly-1.0 norms are typical of a norm that was never "
         "trained (or whose weight was folded into fc).", severity="info"),
    Code("EC080", "verifier is a local path in a config about to be published",
         "The config names its target model (verifier) by a local path (absolute, '~', '/proving-grounds/...', "
         "'./...') instead of a Hub id. Published, it leaks the trainer's file system, nobody can resolve the "
         "target from it, and the model card cannot set base_model (checked by `eagleconv push`, which refuses it "
         "even without --strict: rewrite the config with `eagleconv convert PATH OUT --verifier ORG/NAME` and push "
         "OUT).",
         severity="warning (loading is unaffected; push refuses it unless --ignore EC080)"),
], key=lambda c: c.code)}
