"""Issue 18, parsers: what the header, index and config parsers accept loads everywhere.

Each refusal is checked through the CLI as a user meets it (one line naming the file, exit 2, nothing
written), and each is grounded in the real downstream reader: safetensors' ``safe_open`` or transformers'
``AutoConfig`` refuses the same file (or reads it as something else), so the test states why the refusal
is right, not only that it happens.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.errors import UnsafeInputError
from eagleconv.io.safetensors_header import read_header
from eagleconv.support.jsonio import MAX_DEPTH, loads_strict

REPO = Path(__file__).resolve().parents[2]
try:  # transformers 5 types its configs (and states rope_theta inside rope_parameters); 4.x does neither
    TRANSFORMERS_5 = int(importlib.metadata.version("transformers").split(".")[0]) >= 5
except importlib.metadata.PackageNotFoundError:
    TRANSFORMERS_5 = False


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_refused(result, named: Path, *words: str) -> None:
    """Exit 2, one line, the file named, no traceback and no internal error."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(named) in lines[0], result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    for word in words:
        assert word in lines[0], lines[0]


def edit_header(path: Path, change) -> None:
    """Rewrite a safetensors header in place (tensor bytes unchanged), as a hostile or buggy writer would."""
    blob = path.read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    change(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n:])


def safetensors_refuses(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception:  # noqa: BLE001 - SafetensorError, or whatever the binding raises: refused is refused
        return True
    return False


def transformers_reads(directory: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(directory), local_files_only=True)


def check_every_command_refuses(src: Path, named: Path, tmp_path: Path, *words: str) -> None:
    assert_refused(run("validate", src, "--no-numeric"), named, *words)
    assert_refused(run("inspect", src), named, *words)
    as_json = run("inspect", src, "--json")  # the JSON refusal on stdout, the line on stderr
    payload = json.loads(as_json.output.splitlines()[0])
    assert as_json.exit_code == payload["exit_code"] == 2 and str(named) in payload["error"], as_json.output
    assert_refused(run("convert", src, tmp_path / "out", "--to", "speculators"), named, *words)
    assert not (tmp_path / "out").exists()
    stage = tmp_path / "stage"
    assert_refused(run("push", src, "org/d", "--dry-run", "--stage-dir", stage), named, *words)
    assert not stage.exists()


# -- item 1a: __metadata__ must be null or a str -> str map ----------------------------------

@pytest.mark.parametrize("metadata", [[], 0, False, ""])
def test_metadata_that_is_not_a_map_is_refused(drafter, tmp_path, metadata):
    src = drafter(producer="vllm")
    shard = src / "model.safetensors"
    edit_header(shard, lambda h: h.__setitem__("__metadata__", metadata))
    assert safetensors_refuses(shard)  # "invalid type: sequence, expected a map" and the like
    check_every_command_refuses(src, shard, tmp_path, "__metadata__")


def test_null_metadata_is_no_metadata_as_in_safetensors(drafter):
    src = drafter(producer="vllm")
    shard = src / "model.safetensors"
    edit_header(shard, lambda h: h.__setitem__("__metadata__", None))
    assert not safetensors_refuses(shard)
    assert read_header(shard).metadata == {}
    assert run("validate", src, "--no-numeric").exit_code == 0


# -- item 1b: a zero-size tensor whose shape overflows ----------------------------------------

def _add_empty(shape: list[int], dtype: str = "F32"):
    def change(header: dict) -> None:
        header["extra.empty"] = {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}
    return change


@pytest.mark.parametrize("shape", [[0, 2**70], [2**63, 2, 0], [0, 2**62, 2**2], [0, 2**63]])
def test_empty_tensor_whose_element_count_overflows_is_refused(tmp_path, shape):
    from safetensors.torch import save_file
    import torch

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    edit_header(path, _add_empty(shape, "F32"))
    with pytest.raises(UnsafeInputError, match="element count overflows 64 bits") as refused:
        read_header(path)
    assert refused.value.exit_code == 2 and refused.value.path == str(path)
    # the first two are refused by safetensors itself; the third only in another dimension order, the last
    # by torch (a dimension past int64): refused in every order, so the promise holds whatever the order
    reordered = tmp_path / "reordered.safetensors"
    reordered.write_bytes(path.read_bytes())
    edit_header(reordered, _add_empty(sorted(shape, reverse=True), "F32"))
    assert safetensors_refuses(reordered) or _torch_load_refuses(reordered)


def _torch_load_refuses(path: Path) -> bool:
    from safetensors.torch import load_file

    try:
        load_file(str(path))
    except Exception:  # noqa: BLE001 - whatever the binding raises, refused is refused
        return True
    return False


def test_empty_tensor_that_fits_is_accepted_and_loads(tmp_path):
    from safetensors.torch import load_file, save_file
    import torch

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    edit_header(path, _add_empty([2**20, 0, 2**30], "F64"))
    assert read_header(path).entries["extra.empty"].shape == (2**20, 0, 2**30)
    assert load_file(str(path))["extra.empty"].shape == (2**20, 0, 2**30)


def test_overflowing_empty_tensor_is_refused_by_the_cli(drafter, tmp_path):
    src = drafter(producer="vllm")
    shard = src / "model.safetensors"
    edit_header(shard, _add_empty([0, 2**70]))
    check_every_command_refuses(src, shard, tmp_path, "overflows 64 bits")


def test_negative_zero_is_no_integer_in_a_header(tmp_path):
    """serde_json reads -0 as a float: safetensors refuses it as a dimension or an offset."""
    path = tmp_path / "model.safetensors"
    text = b'{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text)
    assert safetensors_refuses(path)
    with pytest.raises(UnsafeInputError, match="-0"):
        read_header(path)


# -- item 1c: config.json must be UTF-8 without a byte-order mark ------------------------------

@pytest.mark.parametrize("encode", [lambda t: t.encode("utf-16"), lambda t: b"\xef\xbb\xbf" + t.encode(),
                                    lambda t: t.encode("utf-16-le")], ids=["utf-16", "utf-8-bom", "utf-16-le"])
def test_config_not_in_plain_utf8_is_refused(drafter, tmp_path, encode):
    src = drafter(producer="vllm")
    config = src / "config.json"
    config.write_bytes(encode(config.read_text()))
    with pytest.raises(OSError, match="not a valid JSON"):
        transformers_reads(src)
    check_every_command_refuses(src, config, tmp_path, "UTF-8 without a byte-order mark")
    assert_refused(run("lint", config), config, "UTF-8")


@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", b""])
def test_header_not_in_plain_utf8_is_refused(tmp_path, prefix):
    """A BOM, or UTF-8-encoded surrogates (which Python's json decodes with surrogatepass)."""
    path = tmp_path / "model.safetensors"
    name = b"\xed\xa0\x80" if not prefix else b"a"
    text = prefix + b'{"' + name + b'":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"xy")
    assert safetensors_refuses(path)
    with pytest.raises(UnsafeInputError, match="UTF-8"):
        read_header(path)


# -- item 4: a dtype that is not a string -------------------------------------------------------

@pytest.mark.parametrize("dtype", [["BOOL"], {"U8": None}, 8, None])
def test_non_string_dtype_is_an_input_error_naming_the_file(drafter, tmp_path, dtype):
    src = drafter(producer="vllm")
    shard = src / "model.safetensors"
    edit_header(shard, lambda h: h["d2t"].__setitem__("dtype", dtype))
    check_every_command_refuses(src, shard, tmp_path, "'d2t'", "dtype")


# -- item 6: numbers beyond a double ------------------------------------------------------------

@pytest.mark.parametrize("field", ["rope_theta", "rms_norm_eps"])
def test_number_beyond_a_double_is_refused(drafter, tmp_path, field):
    src = drafter(producer="vllm")
    config = src / "config.json"
    text = config.read_text()
    stated = json.loads(text)[field]
    config.write_text(text.replace(f'"{field}": {json.dumps(stated)}', f'"{field}": 1e999'))
    read = transformers_reads(src)  # transformers reads it, as inf: the drafter would run with it
    theta = read.rope_parameters["rope_theta"] if TRANSFORMERS_5 else read.rope_theta  # 4.x: a field of its own
    assert (theta if field == "rope_theta" else read.rms_norm_eps) == float("inf")
    assert_refused(run("validate", src, "--forward"), config, field, "beyond a double")
    check_every_command_refuses(src, config, tmp_path, field, "beyond a double")
    assert_refused(run("lint", config), config, field)


# -- item 7: internal errors from config content ----------------------------------------------

def test_lone_surrogate_is_refused_by_every_command(drafter, tmp_path):
    src = drafter(producer="vllm")
    config = src / "config.json"
    config.write_text(config.read_text().replace('"model_type"', '"_name_or_path": "\\ud800", "model_type"'))
    with pytest.raises(UnicodeEncodeError):  # what convert and inspect --json used to die of
        json.dumps(json.loads(config.read_text()), ensure_ascii=False).encode()
    check_every_command_refuses(src, config, tmp_path, "_name_or_path", "lone surrogate")
    # a real process with a real (UTF-8) stdout: the message itself must be printable
    done = subprocess.run([sys.executable, "-m", "eagleconv", "convert", str(src), str(tmp_path / "o2"),
                           "--to", "speculators"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 2 and str(config) in done.stderr and "\\ud800" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "o2").exists()


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 5000])
def test_deep_config_is_refused_naming_the_field(drafter, tmp_path, depth):
    src = drafter(producer="vllm")
    config = src / "config.json"
    deep = '{"k": ' * depth + "1" + "}" * depth
    config.write_text(config.read_text().replace('"model_type"', f'"nested": {deep}, "model_type"'))
    check_every_command_refuses(src, config, tmp_path, f"deeper than {MAX_DEPTH}", "nested.k.k")
    assert_refused(run("lint", config), config, "nested")


def test_depth_up_to_the_limit_is_accepted():
    """The limit is exact: MAX_DEPTH levels parse, one more is refused (at the same path either way)."""
    assert loads_strict("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    for depth in (MAX_DEPTH + 1, 3000):  # 3000: deeper than Python's json can parse, found by the text scan
        with pytest.raises(UnsafeInputError, match=r"at x\[1\]\.y\[0\]\.\.\.$"):
            loads_strict('{"x": [0, {"y": ' + "[" * (depth - 3) + "]" * (depth - 3) + "}]}", "c.json")


# -- item 12: a shard symlinked to itself ------------------------------------------------------

def test_shard_symlinked_to_itself_is_an_input_error(drafter, tmp_path):
    src = drafter(producer="vllm")
    shard = src / "model.safetensors"
    shard.unlink()
    shard.symlink_to(shard.name)
    check_every_command_refuses(src, shard, tmp_path, "symlink loop")


def test_sharded_and_config_symlink_loops_are_input_errors(drafter, tmp_path):
    from eagleconv.conversion import convert

    sharded = tmp_path / "sharded"
    convert(drafter(producer="vllm"), sharded, "vllm", max_shard_size=2048, durable=False)
    shard = sorted(sharded.glob("model-*.safetensors"))[1]
    shard.unlink()
    shard.symlink_to(shard.name)
    assert_refused(run("validate", sharded, "--no-numeric"), shard, "symlink loop")
    src = drafter(producer="vllm")
    config = src / "config.json"
    config.unlink()
    config.symlink_to("config.json")  # was read as "no config.json"
    check_every_command_refuses(src, config, tmp_path, "symlink loop")


# -- the AutoConfig property's findings: values transformers' config classes refuse are EC005 -----------

@pytest.mark.parametrize("field,value", [("torch_dtype", "float8"), ("torch_dtype", "auto"), ("rms_norm_eps", 1),
                                         ("tie_word_embeddings", None), ("max_position_embeddings", None),
                                         ("bos_token_id", "1"), ("layer_types", ["x"]), ("use_cache", 1),
                                         # found by .ci/fuzz: one entry per layer, and the drafter has one layer
                                         ("layer_types", ["full_attention", "full_attention"])])
def test_values_autoconfig_refuses_are_ec005(drafter, field, value):
    src = drafter(producer="vllm")
    config = json.loads((src / "config.json").read_text())
    config[field] = value
    (src / "config.json").write_text(json.dumps(config))
    if TRANSFORMERS_5:  # the ground truth: transformers 5's typed configs refuse these; 4.x's accept anything
        with pytest.raises(Exception):  # noqa: B017 - AutoConfig's own refusal (several types)
            transformers_reads(src)
    result = run("validate", src, "--no-numeric", "--json")
    payload = json.loads(result.output)
    assert result.exit_code == 1, result.output
    assert any(f["code"] == "EC005" and field in f["message"] for f in payload["findings"]), payload["findings"]


def test_heads_that_do_not_divide_hidden_size_are_ec005_for_a_llama_config(drafter):
    """Found by .ci/fuzz: hidden_size 32 over 5 heads of head_dim 8 is a consistent drafter (q_proj 40 rows, o_proj
    40 columns) that vLLM's math would run, but transformers 5's LlamaConfig refuses it, explicit head_dim or not."""
    from eagleconv.synthetic import TinyDims as Dims

    src = drafter(producer="vllm", dims=Dims(heads=5, kv_heads=1, head_dim=8))
    config = json.loads((src / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"] % config["num_attention_heads"]) == ("llama", 2)
    if TRANSFORMERS_5:  # the ground truth
        with pytest.raises(Exception, match="not a multiple of the number of attention"):
            transformers_reads(src)
    payload = json.loads(run("validate", src, "--no-numeric", "--json").output)
    assert [f["code"] for f in payload["findings"] if f["severity"] == "error"] == ["EC005"], payload["findings"]
    assert "not a multiple of num_attention_heads 5" in payload["findings"][0]["message"]
    assert run("validate", drafter(producer="vllm", dims=Dims(heads=4, kv_heads=1, head_dim=10)),
               "--no-numeric").exit_code == 0  # 32 over 4 heads: divides, even with head_dim 10 (q_proj 40 rows)


def test_every_dtype_name_accepted_is_one_autoconfig_reads(drafter):
    """The table of torch dtype names is checked against torch and against AutoConfig itself."""
    import torch

    from eagleconv.spec.config_types import TORCH_DTYPE_NAMES

    assert all(isinstance(getattr(torch, name, None), torch.dtype) for name in TORCH_DTYPE_NAMES)
    src = drafter(producer="vllm")
    config = json.loads((src / "config.json").read_text())
    for name in sorted(TORCH_DTYPE_NAMES):
        config["torch_dtype"] = name
        (src / "config.json").write_text(json.dumps(config))
        transformers_reads(src)
    assert run("validate", src, "--no-numeric").exit_code == 0  # the last one, as a control


def test_convert_of_a_source_directory_symlinked_to_itself_is_an_input_error(tmp_path):
    """The overlap check resolves the source before anything is read: a loop there was an internal RuntimeError."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop.name)
    out = tmp_path / "out"
    assert_refused(run("convert", loop, out, "--to", "vllm"), loop, "symlink loop")
    assert not out.exists()
