"""Runs INSIDE the speculators virtualenv (no eagleconv there): what speculators 0.9.0 reads and loads.

stdin: {"cases": {case_id: directory}}; stdout: {"versions": {...}, "results": {case_id: {...}}}.
For each directory: the config as speculators' config classes parse it, then a strict load through
``SpeculatorModel.from_pretrained``: every tensor in the files must land in the model with equal
values, no file tensor may be unexpected, and no parameter may stay uninitialised (NaN, or neither
from the file nor from the verifier).
"""

import json
import sys
from pathlib import Path


def read_config(path):
    from speculators import SpeculatorModelConfig

    config = SpeculatorModelConfig.from_pretrained(path)
    layer = config.transformer_layer_config
    verifier = config.speculators_config.verifier
    return {
        "class": type(config).__name__,
        "layer_class": type(layer).__name__,
        "model_type": layer.model_type,
        "hidden_size": layer.hidden_size,
        "num_attention_heads": layer.num_attention_heads,
        "num_key_value_heads": getattr(layer, "num_key_value_heads", None),
        "head_dim": getattr(layer, "head_dim", None),
        "intermediate_size": layer.intermediate_size,
        "vocab_size": config.target_vocab_size,
        "draft_vocab_size": config.draft_vocab_size,
        "target_hidden_size": config.target_hidden_size,
        "rms_norm_eps": getattr(layer, "rms_norm_eps", None),
        "rope_theta": getattr(layer, "rope_theta", None),
        "rope_parameters": getattr(layer, "rope_parameters", None),
        "dtype": str(getattr(config, "dtype", None) or getattr(layer, "dtype", None)).replace("torch.", ""),
        "flags": {k: getattr(config, k) for k in ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual")},
        "aux_layer_ids": config.eagle_aux_hidden_state_layer_ids,
        "verifier": {"name_or_path": verifier.name_or_path, "architectures": list(verifier.architectures or [])},
    }


VERIFIER_OWNED = {"verifier_lm_head.weight", "verifier_norm.weight"}  # loaded from the verifier, never saved


def strict_load(path):
    import torch
    from safetensors.torch import load_file

    from speculators import SpeculatorModel

    files = sorted(Path(path).glob("*.safetensors"))
    on_disk = {}
    for f in files:
        on_disk.update(load_file(str(f)))
    model = SpeculatorModel.from_pretrained(path)
    state = model.state_dict()
    unexpected = sorted(set(on_disk) - set(state))
    differs = sorted(n for n, t in on_disk.items() if n in state and not (
        state[n].shape == t.shape and torch.equal(state[n].to(t.dtype), t)))
    not_from_file = sorted(set(state) - set(on_disk) - VERIFIER_OWNED)
    nan = sorted(n for n, t in state.items() if t.is_floating_point() and bool(torch.isnan(t).any()))
    return {
        "class": type(model).__name__,
        "file_tensors": len(on_disk),
        "unexpected": unexpected,
        "differs": differs,
        "not_from_file": not_from_file,
        "nan": nan,
        "fc_norm_modules": len(model.fc_norm) if getattr(model, "fc_norm", None) is not None else 0,
        "input_norm": getattr(model, "input_norm", None) is not None,
        "embed_from_verifier": "embed_tokens.weight" not in on_disk,
    }


def main():
    import speculators  # noqa: F401 - fail at start, not per case, when speculators is missing
    import torch
    import transformers

    request = json.load(sys.stdin)
    results = {}
    for case, path in request["cases"].items():
        out = {}
        for key, fn in (("config", read_config), ("load", strict_load)):
            try:
                out[key] = fn(path)
            except Exception as exc:  # noqa: BLE001 - reported to the main environment, which decides
                out[key] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        results[case] = out
    from importlib.metadata import version

    versions = {"speculators": version("speculators"), "transformers": transformers.__version__,
                "torch": torch.__version__}
    json.dump({"versions": versions, "results": results}, sys.stdout, default=str)


if __name__ == "__main__":
    main()
