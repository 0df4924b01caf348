"""The catalog of finding codes.  Codes are stable: never renumber, only add.

The findings reference (``FINDINGS.md`` beside this file, and ``eagleconv
findings``) is generated from this table, and a test keeps them in sync.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    code: str
    title: str
    explanation: str


CODES: dict[str, Code] = {c.code: c for c in [
    Code("EC001", "duplicate JSON key",
         "A JSON file (config, index, safetensors header) has a duplicate key. Parsers disagree on which value "
         "wins (Python keeps the last, others the first), so the file means different things to different tools."),
    Code("EC002", "not an EAGLE-3-family drafter",
         "The checkpoint is an EAGLE-1/EAGLE-2 drafter or unrecognisable as any EAGLE-3 layout."),
    Code("EC003", "unmapped or misplaced tensor",
         "A tensor name matches no rule of the checkpoint's layout, two names map to the same tensor, or a name "
         "from another layout is mixed in. Engines either refuse it or silently ignore it."),
    Code("EC004", "shape-bearing field missing",
         "A field that determines tensor shapes (hidden size, heads, head dim, vocab sizes, aux count) is absent "
         "from the config and cannot be derived exactly from the tensors. Engines would guess it."),
    Code("EC005", "invalid config value",
         "A config value has the wrong type or an impossible value (e.g. draft_vocab_size > vocab_size)."),
    Code("EC010", "aux layer ids absent",
         "The config does not say which target layers feed the drafter, so the engine guesses "
         "(vLLM: (2, L//2, L-3)). A wrong guess silently collapses acceptance."),
    Code("EC011", "aux hidden state count mismatch",
         "The number of aux hidden states the checkpoint was trained with differs from the count the engine "
         "will build fc for, so loading fails or the engine feeds the wrong number of states."),
    Code("EC020", "conflicting norm flags",
         "norm_before_fc and fc_norm are both set; they are mutually exclusive."),
    Code("EC021", "EAGLE-3.1 norm flag and tensors disagree",
         "Norm tensors are present without their flag (vLLM raises at load), or a flag is set without its "
         "tensors (vLLM silently keeps weight 1.0)."),
    Code("EC030", "invalid vocab mapping",
         "d2t/t2d are inconsistent: wrong length, absolute instead of offset ids, out of range, duplicates, "
         "disagreement with t2d, or a compressed vocab without a usable mapping."),
    Code("EC040", "engine cannot load the architecture as intended",
         "The engine does not recognise this architecture/model_type as the drafter class it needs."),
    Code("EC050", "tensor shape contradicts the config",
         "A tensor's shape differs from what the config implies, or a required tensor is missing."),
    Code("EC060", "non-finite weights",
         "A tensor contains NaN or Inf."),
]}
