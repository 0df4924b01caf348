"""Issue 28 (items 1-4, 8-10, 18): sizes from configs are bounded before anything is allocated, the target's files go
through the strict readers, simulate stops where vLLM stops, and memory bombs end in one line naming the input.

Every command runs in a real subprocess (``python -m eagleconv``); the bad inputs are the tiny pair's real files
with one field or one file changed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

PAIR = Path(__file__).resolve().parent.parent / "fixtures" / "tiny-pair"
TARGET, EAGLE3, EAGLE31 = PAIR / "target", PAIR / "eagle3", PAIR / "eagle31"
ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m eagleconv ARGS`` under a 6 GiB address-space limit: a regression cannot take the machine."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, input=stdin, preexec_fn=limited(6))


def limited(gib: float):
    import resource

    def apply() -> None:
        limit = int(gib * 1024 ** 3)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def cli_limited(gib: float, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, preexec_fn=limited(gib))


def one_line(result: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    """Exit ``code`` (2: unreadable or unsafe input), one line on stderr naming every needle, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def copy_with(src: Path, out: Path, **changes) -> Path:
    """``src`` copied (weights too: a target's files must resolve inside its directory) with config fields changed."""
    shutil.copytree(src, out)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


# -- item 1 / deliverable 2: one config line cannot take all the memory ------------------------------------------

@pytest.mark.parametrize("args", [("validate", "{d}", "--no-numeric"), ("inspect", "{d}"), ("lint", "{d}/config.json"),
                                  ("push", "{d}", "org/name", "--dry-run", "--no-forward"),
                                  ("convert", "{d}", "{out}", "--to", "vllm")])
def test_a_billion_layers_is_one_line(args, tmp_path):
    d = copy_with(EAGLE31, tmp_path / "d", num_hidden_layers=1_000_000_000)
    result = cli_limited(3, *(a.format(d=d, out=tmp_path / "out") for a in args))  # main: MemoryError in 30 s
    one_line(result, "config.json", "num_hidden_layers = 1000000000", "limit")
    assert not (tmp_path / "out").exists()


def test_100k_aux_ids_are_one_refusal_not_100k_findings(tmp_path):
    ids = list(range(100_000))
    d = copy_with(EAGLE31, tmp_path / "d", eagle_aux_hidden_state_layer_ids=ids)
    one_line(cli_limited(3, "validate", str(d), "--no-numeric"), "eagle_aux_hidden_state_layer_ids",
             "100000 layer ids")


def test_a_state_dict_config_is_bounded_in_the_library():
    import eagleconv
    from eagleconv.errors import UnsafeInputError

    cfg = json.loads((EAGLE31 / "config.json").read_text())
    cfg["num_hidden_layers"] = 10 ** 9
    with pytest.raises(UnsafeInputError, match="num_hidden_layers"):
        eagleconv.lint(cfg)


# -- item 2 / deliverable 3: the target's config through the strict, typed reader ---------------------------------

@pytest.mark.parametrize("field,value,needle", [
    ("num_hidden_layers", 10 ** 9, "num_hidden_layers"),
    ("num_attention_heads", 0, "num_attention_heads"),
    ("rms_norm_eps", "x", "rms_norm_eps"),
    ("num_hidden_layers", 4.7, "num_hidden_layers"),
    ("num_hidden_layers", "4", "num_hidden_layers"),
    ("rms_norm_eps", -1e-5, "rms_norm_eps"),
    ("num_key_value_heads", 4, "num_key_value_heads"),  # the tensors hold 2 heads
    ("vocab_size", 600, "vocab_size"),  # the tensors hold 512 rows
])
def test_target_config_fields_are_one_line(field, value, needle, tmp_path):
    target = copy_with(TARGET, tmp_path / "target", **{field: value})
    one_line(cli_limited(3, "simulate", str(EAGLE3), "--target", str(target), "--max-tokens", "2"), "config.json", needle)


@pytest.mark.parametrize("text,needle,code", [
    ('"num_hidden_layers": 1e999', "beyond a double", 2),
    ('"rms_norm_eps": NaN', "NaN", 2),
    ('"num_hidden_layers": 4, "num_hidden_layers": 4', "duplicate key", 1),  # EC001 is a finding everywhere
])
def test_target_config_json_is_read_strictly(text, needle, code, tmp_path):
    target = tmp_path / "target"
    shutil.copytree(TARGET, target)
    raw = (TARGET / "config.json").read_text().replace('"num_hidden_layers": 4', text.replace(", NaN", "")) \
        if "NaN" not in text else (TARGET / "config.json").read_text().replace('"rms_norm_eps": 1e-05', text)
    (target / "config.json").write_text(raw)
    one_line(cli("simulate", str(EAGLE3), "--target", str(target), "--max-tokens", "2"), "config.json", needle,
             code=code)


@pytest.mark.parametrize("command", ["validate", "upgrade"])
def test_mismatched_kv_heads_are_one_line_in_validate_and_upgrade(command, tmp_path):
    target = copy_with(TARGET, tmp_path / "target", num_key_value_heads=4)
    args = (["validate", str(EAGLE3), "--forward", "--target", str(target)] if command == "validate" else
            ["upgrade", str(EAGLE3), str(tmp_path / "out"), "--target", str(target), "--prompts",
             str(PAIR / "prompts.json")])
    line = one_line(cli(*args), "num_key_value_heads", "k_proj")
    assert "ignore_mismatched_sizes" not in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shard", ["../outside/model.safetensors", "/abs/model.safetensors"])
def test_target_index_outside_its_directory_is_refused(shard, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(TARGET / "config.json", target / "config.json")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(TARGET / "model.safetensors", outside / "model.safetensors")
    from safetensors import safe_open

    with safe_open(str(TARGET / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: shard for n in names}}))
    one_line(cli("simulate", str(EAGLE3), "--target", str(target), "--max-tokens", "2"), "index")


def test_target_weights_symlinked_outside_are_refused_not_copied(tmp_path):
    """No fallback around the header pre-parser: what `inspect` refuses, simulate refuses."""
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(TARGET / "config.json", target / "config.json")
    (target / "model.safetensors").symlink_to(TARGET / "model.safetensors")
    one_line(cli("simulate", str(EAGLE3), "--target", str(target), "--max-tokens", "2"), "outside")


# -- item 4 / deliverable 4: simulate stops where vLLM stops -------------------------------------------------------

def test_a_prompt_longer_than_max_model_len_is_refused(tmp_path):
    prompts = tmp_path / "long.json"
    prompts.write_text(json.dumps([[1] * 600]))  # the target has 512 positions
    one_line(cli("simulate", str(EAGLE3), "--target", str(TARGET), "--prompts", str(prompts)), "long.json",
             "max_position_embeddings 512")


def test_generation_stops_at_max_model_len(tmp_path):
    """An 8-position target: a 3-token prompt gets 5 tokens (vLLM: FINISHED_LENGTH_CAPPED at num_tokens 8), the
    first 5 of what a 512-position target generates, and the report says why."""
    target = copy_with(TARGET, tmp_path / "target", max_position_embeddings=8)
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps([[1, 5, 7], [1, 2, 3, 4, 5, 6]]))
    capped = cli("simulate", str(EAGLE3), "--target", str(target), "--prompts", str(prompts), "--max-tokens", "8",
                 "--json")
    full = cli("simulate", str(EAGLE3), "--target", str(TARGET), "--prompts", str(prompts), "--max-tokens", "8",
               "--json")
    assert capped.returncode == 0 and full.returncode == 0, capped.stderr + full.stderr
    a, b = json.loads(capped.stdout), json.loads(full.stdout)
    assert [len(t) for t in a["tokens"]] == [5, 2]
    assert a["tokens"] == [t[:n] for t, n in zip(b["tokens"], (5, 2))]
    assert any("max_model_len 8" in n for n in a["notes"])


def test_a_prompt_of_exactly_max_model_len_is_refused(tmp_path):
    target = copy_with(TARGET, tmp_path / "target", max_position_embeddings=8)
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps([[1] * 8]))
    one_line(cli("simulate", str(EAGLE3), "--target", str(target), "--prompts", str(prompts)), "no room")


# -- item 8: memory bombs ------------------------------------------------------------------------------------------

def test_prompts_from_dev_zero_and_a_sparse_3gb_file(tmp_path):
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as fh:
        fh.truncate(3 * 1024 ** 3)
    for source in ("/dev/zero", str(sparse)):
        one_line(cli("simulate", str(EAGLE3), "--target", str(TARGET), "--prompts", source), source, "limit")
        one_line(cli("validate", str(EAGLE3), "--forward", "--target", str(TARGET), "--prompts", source), source,
                 "limit")


def test_prompts_through_a_pipe_still_work():
    prompts = json.dumps([[1, 5, 7]])
    result = cli("simulate", str(EAGLE3), "--target", str(TARGET), "--prompts", "/dev/stdin", "--max-tokens", "2",
                 "--json", stdin=prompts)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["tokens"]) == 1


@pytest.mark.parametrize("flag,value", [("--max-tokens", "1000000000000"), ("--num-speculative-tokens", "100000")])
def test_huge_decode_arguments(flag, value):
    one_line(cli("simulate", str(EAGLE3), "--target", str(TARGET), flag, value), flag)


def sparse_drafter(src: Path, out: Path, vocab: int) -> Path:
    """``src`` with vocab_size = draft_vocab_size = ``vocab``: a valid header whose data is a sparse hole."""
    out.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    old_v, old_d = cfg["vocab_size"], cfg["draft_vocab_size"]
    cfg.update(vocab_size=vocab, draft_vocab_size=vocab)
    (out / "config.json").write_text(json.dumps(cfg))
    raw = (src / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    sizes = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "BOOL": 1}
    new, offset = {}, 0
    for name, e in header.items():
        if name == "__metadata__":
            new[name] = e
            continue
        shape = list(e["shape"])
        if (name.endswith(("embed_tokens.weight", "t2d")) and shape[0] == old_v) or \
                (name.endswith(("lm_head.weight", "d2t")) and shape[0] == old_d):
            shape[0] = vocab
        size = sizes[e["dtype"]]
        for d in shape:
            size *= d
        new[name] = {"dtype": e["dtype"], "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(new).encode()
    text += b" " * (-len(text) % 8)
    with open(out / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        fh.truncate(8 + len(text) + offset)
    return out


@pytest.mark.parametrize("vocab,needle", [
    (6_000_000, "more than this machine can give"),  # 5.7 GiB of lm_head: within the bounds, not within memory
    (12 * 1024 ** 3 // (4 * 256), "vocab_size"),  # 12 GiB: draft_vocab_size over the config bound already
])
def test_a_sparse_huge_drafter_is_one_line(vocab, needle, tmp_path):
    """A sparse drafter file (valid header, the data a hole) under a 4 GiB address-space limit: one line naming the
    drafter, before its weights are read (main: ENOMEM, an internal error)."""
    d = sparse_drafter(EAGLE3, tmp_path / "big", vocab)
    for args in (("simulate", str(d), "--target", str(TARGET), "--max-tokens", "2"),
                 ("validate", str(d), "--forward", "--target", str(TARGET))):
        one_line(cli_limited(4, *args), str(d), needle)


def test_a_sparse_huge_calibration_file_is_refused(tmp_path):
    """A calibration header claiming 12 GiB of states over a sparse file: one line before a byte is read."""
    rows = 12 * 1024 ** 3 // (4 * 768)
    text = json.dumps({"aux_hidden_states": {"dtype": "F32", "shape": [rows, 768],
                                             "data_offsets": [0, rows * 768 * 4]}}).encode()
    text += b" " * (-len(text) % 8)
    calibration = tmp_path / "calibration.safetensors"
    with open(calibration, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        fh.truncate(8 + len(text) + rows * 768 * 4)
    result = cli_limited(4, "upgrade", str(EAGLE3), str(tmp_path / "out"), "--calibration", str(calibration))
    one_line(result, "calibration.safetensors", "aux_hidden_states")
    assert not (tmp_path / "out").exists()


# -- item 9: an all-zero calibration -------------------------------------------------------------------------------

def test_an_all_zero_calibration_is_one_line(tmp_path):
    import torch
    from safetensors.torch import save_file

    states = torch.zeros(12, 3 * 256)
    path = tmp_path / "zero.safetensors"
    save_file({"aux_hidden_states": states}, str(path), metadata={"aux_layer_ids": "[1, 2, 3]"})
    result = cli("upgrade", str(EAGLE3), str(tmp_path / "out"), "--calibration", str(path))
    one_line(result, "zero.safetensors", "all zero")
    assert not (tmp_path / "out").exists()


# -- item 10: simulate --max-tokens 1 --json against its schema ---------------------------------------------------

def test_max_tokens_1_report_validates_against_the_published_schema():
    import jsonschema

    result = cli("simulate", str(EAGLE3), "--target", str(TARGET), "--max-tokens", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["num_drafts"] == 0 and report["acceptance_length"] is None
    jsonschema.validate(report, json.loads((ROOT / "schemas" / "report-simulate.schema.json").read_text()))
    table = cli("simulate", str(EAGLE3), "--target", str(TARGET), "--max-tokens", "1")
    assert table.returncode == 0 and "n/a" in table.stdout, table.stderr


# -- item 18: EC062's mean in float64 ------------------------------------------------------------------------------

def test_ec062_mean_of_huge_norm_weights_is_finite(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    d = tmp_path / "d"
    shutil.copytree(EAGLE31, d)
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    name = next(n for n in tensors if "fc_norm" in n)
    tensors[name] = tensors[name].clone().fill_(1e37)
    save_file(tensors, str(d / "model.safetensors"), metadata=metadata)
    result = cli("validate", str(d), "--json")
    findings = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "EC062" and f["tensor"] == name]
    assert findings and "mean 1e+37" in findings[0]["message"], findings
