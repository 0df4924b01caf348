"""Runs INSIDE a transformers virtualenv (no eagleconv there): what AutoConfig reads from each directory.

stdin: {"cases": {case_id: directory}}; stdout: {"version": ..., "results": {case_id: {...} | {"error": ...}}}.
Values are reported as the loaded config object exposes them, so the main environment compares
what this transformers release *reads* with eagleconv's DrafterSpec.
"""

import json
import sys


def read(path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    raw = config.to_dict()
    dtype = getattr(config, "dtype", None) if hasattr(config, "dtype") else None
    if dtype is None:
        dtype = getattr(config, "torch_dtype", None)
    return {
        "class": type(config).__name__,
        "model_type": config.model_type,
        "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": getattr(config, "num_key_value_heads", None),
        "head_dim": getattr(config, "head_dim", None),
        "intermediate_size": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": getattr(config, "max_position_embeddings", None),
        "rms_norm_eps": getattr(config, "rms_norm_eps", None),
        # transformers 4.x reads the legacy pair; 5.x reads rope_parameters (None when the class has none)
        "rope_theta": getattr(config, "rope_theta", None),
        "rope_scaling": getattr(config, "rope_scaling", None),
        "rope_parameters": getattr(config, "rope_parameters", None),
        "dtype": None if dtype is None else str(dtype).replace("torch.", ""),
        "attributes": {k: raw.get(k) for k in (
            "draft_vocab_size", "target_hidden_size", "num_aux_hidden_states", "eagle_aux_hidden_state_layer_ids",
            "eagle_config", "fc_norm", "norm_before_fc", "norm_output", "norm_before_residual") if k in raw},
    }


def main():
    import transformers

    request = json.load(sys.stdin)
    results = {}
    for case, path in request["cases"].items():
        try:
            results[case] = read(path)
        except Exception as exc:  # noqa: BLE001 - reported to the main environment, which decides
            results[case] = {"error": f"{type(exc).__name__}: {exc}"}
    json.dump({"version": transformers.__version__, "results": results}, sys.stdout, default=str)


if __name__ == "__main__":
    main()
