"""The vLLM parity tier's eagleconv side: the broken variants, eagleconv's prediction for each, and the verdicts.

The tier (``.ci/vllm-parity``) builds every case here, asks ``validate --engine vllm`` what vLLM will do with it,
runs real vLLM on it in its own virtualenv (``.ci/vllm_parity_runner.py``, JSON in and out), and checks the
prediction and ``simulate``'s counters and drafted tokens against what vLLM did.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..support.jsonio import JSONObject, JSONValue
from .api import validate

if TYPE_CHECKING:
    import torch

    from ..spec.report import Finding

# "unverified": it loads, and runs as intended only if a value the engine guesses (the checkpoint does not state it)
# is what the drafter was trained with; either run that loads agrees with it (see ``agrees``).
Outcome = Literal["intended", "fails", "differs", "unverified"]
OUTCOME_TEXT = {"intended": "loads and behaves as intended", "fails": "fails at load",
                "differs": "loads but behaves differently",
                "unverified": "loads; behaves as intended only if the engine's guess is what it was trained with"}


def agrees(predicted: str, observed: str) -> bool:
    """Whether what vLLM did (``observed``: intended, differs, fails) is what eagleconv predicted."""
    return observed == predicted or (predicted == "unverified" and observed in ("intended", "differs"))

REPO = Path(__file__).resolve().parent.parent.parent
TINY_PAIR = REPO / "fixtures" / "tiny-pair"

Edit = Callable[[JSONObject, "dict[str, torch.Tensor]"], object]  # (config, tensors), edited in place; returns ignored


@dataclass(frozen=True)
class Variant:
    """A deliberately broken copy of a tiny-pair drafter."""

    name: str
    base: str  # eagle3 | eagle31
    what: str
    edit: Edit
    known_gap: str = ""  # why eagleconv's prediction is known to differ from what vLLM did (reported, not hidden)
    undefined: bool = False  # what vLLM does is not determined (uninitialised memory): the gap shows on some runs
    # the edit changes what the checkpoint says it computes, not its weights (hidden_act): drafting exactly as the
    # base drafter then means the engine ignored the statement ("differs"), drafting otherwise that it followed it
    stated: bool = False


def _eagle_config(config: JSONObject) -> JSONObject:
    nested = config["eagle_config"]
    if not isinstance(nested, dict):
        raise TypeError(f"eagle_config is a {type(nested).__name__}, not an object")
    return nested


def _pop_aux(config: JSONObject, *, top: bool = True, nested: bool = True) -> None:
    if top:
        config.pop("eagle_aux_hidden_state_layer_ids", None)
    if nested and config.get("eagle_config"):
        _eagle_config(config).pop("eagle_aux_hidden_state_layer_ids", None)


def _rename(tensors: dict[str, torch.Tensor], old: str, new: str) -> None:
    for name in [n for n in tensors if n.startswith(old)]:
        tensors[new + name[len(old):]] = tensors.pop(name)


def _marked_midlayer(config: JSONObject, tensors: dict[str, torch.Tensor]) -> None:
    _rename(tensors, "layers.0.", "midlayer.")
    config["eagleconv"] = {"layout": "vllm"}


def _drop(tensors: dict[str, torch.Tensor], prefix: str) -> None:
    for name in [n for n in tensors if n.startswith(prefix)]:
        del tensors[name]


def _prefix_model(tensors: dict[str, torch.Tensor]) -> None:
    for name in [n for n in tensors if not n.startswith(("lm_head", "d2t", "t2d"))]:
        tensors["model." + name] = tensors.pop(name)


def _set_aux(config: JSONObject, ids: list[int]) -> None:
    config["eagle_aux_hidden_state_layer_ids"] = list[JSONValue](ids)
    _eagle_config(config)["eagle_aux_hidden_state_layer_ids"] = list[JSONValue](ids)


def _four_aux(config: JSONObject) -> None:
    config["eagle_aux_hidden_state_layer_ids"] = [0, 1, 2, 3]
    _eagle_config(config)["eagle_aux_hidden_state_layer_ids"] = [0, 1, 2, 3]
    config["num_aux_hidden_states"] = 4


VARIANTS: tuple[Variant, ...] = (
    Variant("fc_norm tensors without the flag", "eagle31", "fc_norm.* kept, fc_norm removed from the config",
            lambda c, t: c.pop("fc_norm")),
    Variant("fc_norm flag without the tensors", "eagle31", "fc_norm: true, fc_norm.* removed",
            lambda c, t: _drop(t, "fc_norm.")),
    Variant("norm_output on an EAGLE-3 checkpoint", "eagle3", "norm_output: true added",
            lambda c, t: c.update(norm_output=True)),
    Variant("model.-prefixed keys", "eagle3", "every key but lm_head/d2t/t2d under model.",
            lambda c, t: _prefix_model(t)),
    Variant("4 aux ids, fc built for 3", "eagle3", "aux ids [0, 1, 2, 3] and num_aux_hidden_states 4; fc is [H, 3H]",
            lambda c, t: _four_aux(c)),
    Variant("explicit duplicate aux ids", "eagle3", "aux ids [2, 2, 1] everywhere (num_aux_hidden_states 3 kept)",
            lambda c, t: _set_aux(c, [2, 2, 1])),
    Variant("aux ids only under eagle_config", "eagle3", "top-level eagle_aux_hidden_state_layer_ids removed",
            lambda c, t: _pop_aux(c, nested=False)),
    Variant("no aux ids at all", "eagle3", "aux ids removed everywhere (num_aux_hidden_states 3 kept)",
            lambda c, t: _pop_aux(c)),
    Variant("lm_head missing, draft vocab < vocab", "eagle3", "lm_head.weight removed (draft vocab 256 of 512)",
            lambda c, t: t.pop("lm_head.weight")),
    Variant("d2t missing", "eagle3", "d2t removed, t2d kept", lambda c, t: t.pop("d2t")),
    Variant("t2d only", "eagle31", "d2t removed from the EAGLE-3.1 drafter: only t2d maps the vocab",
            lambda c, t: t.pop("d2t")),
    Variant("midlayer.* names in a vLLM config", "eagle3", "layers.0.* renamed midlayer.*",
            lambda c, t: _rename(t, "layers.0.", "midlayer."),
            known_gap="midlayer.* tensors with LlamaForCausalLMEagle3 is exactly what SpecForge exports, so eagleconv "
                      "reads the ids in SpecForge's layer_output numbering (one layer off); this checkpoint was "
                      "trained with vLLM's numbering, and vLLM (renaming midlayer. to layers.0.) runs it as intended"),
    Variant("midlayer.* names under eagleconv's vllm marker", "eagle3",
            "layers.0.* renamed midlayer.*, the config marked eagleconv.layout = vllm (a SpecForge export renamed by "
            "hand into a converted config)",
            lambda c, t: _marked_midlayer(c, t)),
    Variant("num_hidden_layers 2 for a 1-layer checkpoint", "eagle3", "num_hidden_layers: 2, one layer of tensors",
            lambda c, t: c.update(num_hidden_layers=2),
            known_gap="vLLM leaves layer 1 as torch.empty: undefined. One CPU run got all-zero memory (an identity "
                      "layer: the drafts equalled the 1-layer drafter's), the next got garbage (0 of 372 drafts "
                      "accepted); eagleconv's 'behaves differently' is right whenever the memory is not zero, and "
                      "simulate refuses to guess", undefined=True),
    Variant("norm_before_fc together with fc_norm", "eagle31", "norm_before_fc: true on the fc_norm drafter",
            lambda c, t: c.update(norm_before_fc=True) or _eagle_config(c).update(norm_before_fc=True)),
)


def slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-").replace("--", "-")


def build_variant(variant: Variant, out: Path, tiny_pair: Path = TINY_PAIR) -> Path:
    """Write the variant as a checkpoint directory under ``out`` (named ...eagle3... so vLLM's path rules agree)."""
    from safetensors.torch import load_file, save_file

    src = tiny_pair / variant.base
    dst = out / f"eagle3-variant-{slug(variant.name)}"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    config = json.loads((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    variant.edit(config, tensors)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return dst


def predict(path: Path, target: Path) -> tuple[Outcome, list[str]]:
    """eagleconv's prediction for vLLM 0.32 (V1 runner), from ``validate --engine vllm:0.32 --target``'s findings.

    An error finding whose ``effect`` is ``load_fails`` (the engine raises, or a shape contradicts what it builds)
    means vLLM fails at load; any other error or warning, except one about the V2 runner only, means it loads but
    runs something else, unless every such finding is ``unverified`` (vLLM guesses what the checkpoint does not
    state: "unverified"); no such finding means it loads and behaves as intended.
    """
    return outcome_of(validate(path, engines=("vllm:0.32",), target=target, numeric=False).findings)


def outcome_of(findings: Sequence[Finding]) -> tuple[Outcome, list[str]]:
    """The outcome ``findings`` predict, read from their code, severity, tensor, ``effect`` and ``runner``."""
    # A tensor the engine's own reading says is harmless (an engine-tagged info) is not a behaviour change.
    harmless = {f.tensor for f in findings if f.engine and f.severity == "info" and f.tensor}
    relevant = [f for f in findings if f.severity in ("error", "warning") and f.code not in IGNORED
                and not (f.engine is None and f.tensor in harmless)]
    fails = [f for f in relevant if f.severity == "error" and f.effect == "load_fails"]
    v1 = [f for f in relevant if f not in fails and f.runner != "V2"]  # the tier runs the V1 runner (CPU)
    differs = [f for f in v1 if f.effect != "unverified"]
    lines = [f"{f.code} {f.severity}: {f.message}" for f in relevant]
    if fails:
        return "fails", lines
    if differs:
        return "differs", lines
    if v1:
        return "unverified", lines
    return "intended", lines


# Method auto-detection (the tier names the method), norm statistics, and EC020 (a trainer's rule: vLLM itself
# accepts norm_before_fc with fc_norm and applies both).
IGNORED = {"EC020", "EC041", "EC062"}

