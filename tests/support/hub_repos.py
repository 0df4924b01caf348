"""What the loopback Hub holds for the header-only ``hf://`` and ``audit`` tests: every fixture, hostile variants,
published configs with synthetic headers, and sparse multi-GB drafters (tests/support/fake_hub.Sparse)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from tests.support.fake_hub import Blob, FakeHub, Sparse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def fixture_checkpoints() -> dict[str, Path]:
    """Every checkpoint under fixtures/ (a directory with a config.json and its weights), by a repository name made
    of its path.  fixtures/mla-variants' targets are records (a config and the tensor names the tier checks its
    built weights against), not checkpoints."""
    weights = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
    found = sorted(p.parent for p in FIXTURES.rglob("config.json")
                   if any(next(p.parent.glob(pattern), None) for pattern in weights))
    return {"fixtures/" + "-".join(d.relative_to(FIXTURES).parts): d for d in found}


def directory_files(directory: Path) -> dict[str, Blob]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def publish(hub: FakeHub, repo_id: str, directory: Path, **options: bool) -> str:
    """``directory``'s files as ``repo_id``'s next commit; its sha."""
    return hub.add(repo_id, directory_files(directory), **options)


def header_bytes(header: object, pad: bool = True) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def sparse_safetensors(tensors: dict[str, tuple[str, list[int]]], itemsize: dict[str, int] | None = None) -> Sparse:
    """A safetensors file whose header lists ``tensors`` (name -> dtype, shape) and whose data is all zeros."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1, **(itemsize or {})}
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    head = header_bytes(header)
    return Sparse(head, len(head) + offset)


def big_drafter(hidden: int = 5120, intermediate: int = 25600, vocab: int = 128256, draft_vocab: int = 32000,
                dtype: str = "F32") -> dict[str, Blob]:
    """A speculators EAGLE-3.1 drafter of a 32B-class target (about 5.5 GB in F32) as Sparse files: its real
    d2t and t2d (a valid vocabulary mapping) sit right after the header, every weight after them is zeros."""
    import numpy as np

    heads, kv_heads, head_dim = hidden // 128, 8, 128
    t2d = np.zeros(vocab, dtype=np.bool_)
    chosen = np.arange(0, 2 * draft_vocab, 2)
    t2d[chosen] = True
    d2t = (chosen - np.arange(draft_vocab)).astype(np.int64)
    shapes: dict[str, tuple[str, list[int]]] = {"d2t": ("I64", [draft_vocab]), "t2d": ("BOOL", [vocab]),
                                                "embed_tokens.weight": (dtype, [vocab, hidden]),
                                                "fc.weight": (dtype, [hidden, 3 * hidden]),
                                                "lm_head.weight": (dtype, [draft_vocab, hidden]),
                                                "norm.weight": (dtype, [hidden])}
    shapes |= {f"fc_norm.{i}.weight": (dtype, [hidden]) for i in range(3)}
    layer = {"hidden_norm": [hidden], "input_layernorm": [hidden], "post_attention_layernorm": [hidden],
             "mlp.down_proj": [hidden, intermediate], "mlp.gate_proj": [intermediate, hidden],
             "mlp.up_proj": [intermediate, hidden], "self_attn.q_proj": [heads * head_dim, 2 * hidden],
             "self_attn.k_proj": [kv_heads * head_dim, 2 * hidden], "self_attn.v_proj": [kv_heads * head_dim, 2 * hidden],
             "self_attn.o_proj": [hidden, heads * head_dim]}
    shapes |= {f"layers.0.{k}.weight": (dtype, v) for k, v in layer.items()}
    file = sparse_safetensors(shapes)
    head = file.head + d2t.tobytes() + t2d.tobytes()
    config = {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
        "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                                     "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                               "verifier": {"name_or_path": "Qwen/Qwen2.5-32B-Instruct",
                                            "architectures": ["LlamaForCausalLM"]}},
        "transformer_layer_config": {"model_type": "llama", "hidden_size": hidden, "intermediate_size": intermediate,
                                     "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                                     "head_dim": head_dim, "num_hidden_layers": 1, "hidden_act": "silu",
                                     "rms_norm_eps": 1e-5, "vocab_size": vocab, "max_position_embeddings": 32768,
                                     "tie_word_embeddings": False, "rope_theta": 1000000.0},
        "draft_vocab_size": draft_vocab, "target_hidden_size": hidden, "norm_before_residual": False,
        "norm_before_fc": False, "fc_norm": True, "norm_output": True, "eagle_aux_hidden_state_layer_ids": [2, 32, 60],
        "torch_dtype": "float32"}
    return {"config.json": json.dumps(config, indent=2).encode(), "model.safetensors": Sparse(head, file.size)}


def write_sparse(files: dict[str, Blob], directory: Path) -> Path:
    """``files`` on disk, a Sparse one as a sparse file (its head, then a hole to its size)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, blob in files.items():
        with open(directory / name, "wb") as f:
            if isinstance(blob, Sparse):
                f.write(blob.head)
                f.truncate(blob.size)
            else:
                f.write(blob)
    return directory
