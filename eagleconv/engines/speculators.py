"""vLLM speculators 0.9.0 as a *consumer*: ``SpeculatorModel.from_pretrained`` (PyPI speculators==0.9.0).

Sources: the 0.9.0 wheel (``model.py``, ``models/eagle3/core.py``,
``models/eagle3/model_definitions.py``); every
rule below is checked by the interop tier (``.ci/interop``), which loads
eagleconv's outputs in speculators 0.9.0 itself.  What its loader needs:

- a speculators-format config (``speculators_model_type: eagle3``); anything
  else goes through speculators' own converter, which drops fc_norm/input_norm
  tensors and ``eagle_config`` aux ids;
- ``transformer_layer_config.model_type`` llama or qwen3 (``model_classes``);
- a verifier: ``load_verifier_weights`` calls
  ``AutoConfig.from_pretrained(speculators_config.verifier.name_or_path)``, and
  loads embed_tokens / lm_head / the final norm from it;
- under a compressed vocab both ``d2t`` and ``t2d`` in the file: without them
  the registered buffers stay uninitialised and loading fails (size mismatch);
- fc sized ``K x hidden_size`` (target_hidden_size is not used), K =
  len(eagle_aux_hidden_state_layer_ids) or 3;
- flags at the top level, absent = false; unknown tensor names only warn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..spec.report import Finding
from .registry import register
from .base import CaptureRules, DrafterClass, EngineProfile, EngineView, FlagRule, KeyRules, Subject, Translation
from .checks import check_aux_count, check_capture, check_flags, check_keys, check_sharing, emits, finding
from .tokenspeed import check_fc_width_ignores_target_hidden

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject, JSONValue

VERSION = "0.9.0"
MODEL_TYPES = ("llama", "qwen3")
DRAFT_MODEL = DrafterClass("Eagle3DraftModel", family=None, aux_count_paths=("eagle_aux_hidden_state_layer_ids",),
                           aux_count_default=3)
TOP_LEVEL = ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids", "fc_norm", "norm_before_fc",
             "norm_output", "norm_before_residual", "speculators_config")


def _view(config: Mapping[str, JSONValue]) -> Translation:
    """Eagle3DraftModel reads the decoder from transformer_layer_config and the EAGLE fields from the top level."""
    layer = config.get("transformer_layer_config")
    if not isinstance(layer, Mapping):
        return Translation(None, problems=["no transformer_layer_config: Eagle3SpeculatorConfig builds a default Qwen3 "
                                  "decoder that does not match the weights"])
    view: JSONObject = dict(layer)
    view.update({k: config[k] for k in TOP_LEVEL if k in config})
    view["architectures"] = ["Eagle3DraftModel"]
    problems = []
    if config.get("speculators_model_type") != "eagle3":
        problems.append(f"speculators_model_type {config.get('speculators_model_type')!r} is not eagle3")
    if layer.get("model_type") not in MODEL_TYPES:
        problems.append(f"transformer_layer_config.model_type {layer.get('model_type')!r}: speculators {VERSION} "
                        f"builds Eagle3 layers only for {', '.join(MODEL_TYPES)} (KeyError in model_classes)")
    return Translation(view, problems=problems)


@emits("EC040")
def check_format(subject: Subject, view: EngineView) -> list[Finding]:
    """Only a speculators-format config is loaded as written; anything else is re-converted by speculators."""
    if not view.speculators:
        return [finding(view, "EC040", "error", f"not a speculators-format config: speculators {VERSION}'s "
                        "SpeculatorModel.from_pretrained runs its own Eagle3Converter on it, which drops fc_norm and "
                        "input_norm tensors and eagle_config aux ids; convert with `eagleconv convert --to speculators "
                        "--verifier NAME_OR_PATH`", effect="runs_differently")]
    return [finding(view, "EC040", "error", p, effect="load_fails") for p in view.problems]


@emits("EC043")
def check_verifier(subject: Subject, view: EngineView) -> list[Finding]:
    """load_verifier_weights calls AutoConfig.from_pretrained(verifier.name_or_path): None fails."""
    if not view.speculators:
        return []
    speculators_config = subject.config.get("speculators_config")
    verifier = speculators_config.get("verifier") if isinstance(speculators_config, Mapping) else None
    name = verifier.get("name_or_path") if isinstance(verifier, Mapping) else None
    if isinstance(name, str) and name:
        return []
    hint = f"`eagleconv convert --to speculators --verifier {subject.target.path}`" if subject.target is not None \
        else "`eagleconv convert --to speculators --verifier NAME_OR_PATH`"
    return [finding(view, "EC043", "error", f"speculators_config.verifier.name_or_path is {name!r}: speculators "
                    f"{VERSION}'s SpeculatorModel.from_pretrained calls AutoConfig.from_pretrained on it and fails "
                    f"(OSError); name the target with {hint}", effect="load_fails")]


@emits("EC030")
def check_vocab_buffers(subject: Subject, view: EngineView) -> list[Finding]:
    """Under a compressed vocab speculators keeps zero-filled d2t/t2d buffers unless the file has both."""
    spec = subject.spec
    if not view.speculators or spec is None or not subject.has_tensors or subject.read is None or not spec.compressed_vocab:
        return []
    missing = [n for n in ("d2t", "t2d") if n not in subject.read.tensors]
    if not missing:
        return []
    return [finding(view, "EC030", "error", f"draft vocab {spec.draft_vocab_size} < target vocab {spec.vocab_size} "
                    f"but the file has no {' or '.join(missing)}: speculators {VERSION} leaves that buffer "
                    "uninitialised and from_pretrained fails (lm_head size mismatch after masking with t2d) "
                    "(eagleconv convert --to speculators derives t2d from d2t)", effect="load_fails")]


SPECULATORS_090 = register(EngineProfile(
    engine="speculators", version=VERSION,
    summary="vLLM speculators 0.9.0 SpeculatorModel.from_pretrained (Eagle3DraftModel), checked by .ci/interop",
    flags={k: FlagRule((k,)) for k in ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual")},
    classes={"Eagle3DraftModel": DRAFT_MODEL},
    capture=CaptureRules(paths=("eagle_aux_hidden_state_layer_ids",), default="(2, L//2, L-3)",
                         default_ids=lambda L: (2, L // 2, L - 3)),
    keys=KeyRules(unknown="ignore", unknown_bias="ignore"),
    speculators_view=_view,
    shares_from_target={"embed_tokens.weight": "absent", "lm_head.weight": "absent"},
    checks=(check_format, check_verifier, check_vocab_buffers, check_aux_count, check_capture, check_flags,
            check_keys, check_sharing, check_fc_width_ignores_target_hidden),
    history=("speculators 0.9.0 trains eagle3 with norm_before_fc and norm_output on by default",),
    rank=40,
), in_all=False)  # a training library, not a server: `--engine all` means the serving engines
