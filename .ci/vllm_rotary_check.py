"""vLLM's CPU rotary custom op against its own native rotary, on 3-D and 2-D inputs; prints one JSON line.

Runs inside the vLLM virtualenv (.ci/vllm-env); ``.ci/vllm-parity --mla`` (.ci/vllm_parity_mla.py) reads the line.

    python .ci/vllm_rotary_check.py

vLLM 0.32.0's ``RotaryEmbedding.forward_cpu`` (``torch.ops._C.rotary_embedding``) rotates 3-D ``[T, H, D]``
query/key tensors wrongly (only token 0 / head 0 right), while 2-D ``[T, H*D]`` is exact.  Llama and Qwen3 pass
2-D tensors; MLA passes ``q_pe`` / ``k_pe`` 3-D (vllm/model_executor/layers/mla.py), so a DeepSeek target with
``rope_type: default`` is computed wrongly unless the op is disabled (``custom_ops: ["-rotary_embedding"]``).
The output gives, per style (neox, gptj) and head size, the largest |forward_cpu - forward_native| for each shape.
"""

from __future__ import annotations

import json


def main() -> None:
    import torch
    import vllm
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    torch.manual_seed(0)
    T, H = 7, 4
    errors: dict[str, dict[str, float]] = {"3d": {}, "2d": {}}
    with set_current_vllm_config(VllmConfig()):
        for neox in (True, False):
            for D in (64, 128):
                rope = RotaryEmbedding(D, D, 512, 10000.0, neox, torch.float32)
                positions = torch.arange(3, 3 + T)
                q, k = torch.randn(T, H, D), torch.randn(T, 1, D)  # MLA's q_pe and k_pe
                name = f"{'neox' if neox else 'gptj'} d{D}"
                want_q, want_k = rope.forward_native(positions, q.clone(), k.clone())
                got_q, got_k = rope.forward_cpu(positions, q.clone(), k.clone())
                errors["3d"][name] = max((got_q - want_q).abs().max().item(), (got_k - want_k).abs().max().item())
                q2, k2 = q.reshape(T, H * D), k.reshape(T, D)  # Llama's flattened q and k
                want_q, want_k = rope.forward_native(positions, q2.clone(), k2.clone())
                got_q, got_k = rope.forward_cpu(positions, q2.clone(), k2.clone())
                errors["2d"][name] = max((got_q - want_q).abs().max().item(), (got_k - want_k).abs().max().item())
    print(json.dumps({"vllm": vllm.__version__, **errors}))


if __name__ == "__main__":
    main()
