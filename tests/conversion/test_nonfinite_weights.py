"""convert, upgrade and downgrade refuse NaN/Inf weights (unless forced); the bit-level scan agrees with decoded values."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from eagleconv import convert
from eagleconv.cli.main import cli
from eagleconv.errors import ConversionError
from eagleconv.io.dtypes import to_float32
from tests.support.files import debris, poke


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_convert_refuses_a_nonfinite_weight_unless_forced(drafter, tmp_path, dtype, value):
    src = drafter(producer="specforge", dtype=dtype)
    poke(src, "fc.weight", (1, 2), value)
    width = load_file(src / "model.safetensors")["fc.weight"].shape[1]
    with pytest.raises(ConversionError, match=rf"\[EC060\].*fc.weight has 1 NaN/Inf value\(s\).*flat index {width + 2}"):
        convert(src, tmp_path / "out", "vllm")
    assert not (tmp_path / "out").exists() and debris(tmp_path) == []
    forced = convert(src, tmp_path / "forced", "vllm", force=True)
    assert [f.tensor for f in forced.findings if f.code == "EC060"] == ["fc.weight"]
    assert torch.isnan(load_file(tmp_path / "forced" / "model.safetensors")["fc.weight"][1, 2]) == (value != value)
    skipped = convert(src, tmp_path / "skipped", "vllm", numeric=False)
    assert not [f for f in skipped.findings if f.code == "EC060"]
    assert any("--no-numeric" in n for n in skipped.notes)


def test_convert_cli_nan_exit_1_one_line_and_no_numeric_exit_0(drafter, tmp_path):
    src = drafter(producer="vllm")
    poke(src, "lm_head.weight", (0, 0), float("nan"))
    refused = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "out"), "--to", "speculators", "--verifier", "org/target"])
    assert refused.exit_code == 1
    assert refused.stderr.count("\n") == 1 and "[EC060]" in refused.stderr and "lm_head.weight" in refused.stderr
    as_json = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "out"), "--to", "speculators", "--verifier", "org/target", "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["code"] == "EC060"
    assert not (tmp_path / "out").exists()
    ok = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "out"), "--to", "speculators", "--verifier", "org/target", "--no-numeric"])
    assert ok.exit_code == 0, ok.output
    # validate on the same source agrees with convert's refusal
    assert CliRunner().invoke(cli, ["validate", str(src)]).exit_code == 1


def test_sharded_output_is_checked_in_every_shard(drafter, tmp_path):
    src = drafter(producer="specforge")
    poke(src, "midlayer.mlp.down_proj.weight", (0, 3), float("inf"))
    with pytest.raises(ConversionError, match="down_proj.weight has 1 NaN/Inf"):
        convert(src, tmp_path / "out", "vllm", max_shard_size=2048)
    assert debris(tmp_path) == [] and not (tmp_path / "out").exists()


def test_all_zero_lm_head_is_a_warning_not_a_refusal(drafter, tmp_path):
    src = drafter(producer="vllm")
    tensors = load_file(src / "model.safetensors")
    tensors["lm_head.weight"].zero_()
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    report = convert(src, tmp_path / "out", "specforge")
    assert [(f.code, f.severity, f.tensor) for f in report.findings if f.code == "EC061"] == [
        ("EC061", "warning", "lm_head.weight")]


@pytest.mark.parametrize("dtype,bits", [("BF16", "<u2"), ("F16", "<u2"), ("F32", "<u4"), ("F64", "<u8"),
                                        ("F8_E5M2", "|u1"), ("F8_E4M3", "|u1")])
@pytest.mark.parametrize("window", [None, 64 * 1024])
def test_bit_scan_agrees_with_decoded_values(tmp_path, monkeypatch, dtype, bits, window):
    """Random bit patterns (many NaN/Inf among them) at an unaligned file offset, against a float decode;
    also with small chunks, so counts and the first index add up across chunks."""
    from eagleconv.io import finite
    from eagleconv.io.finite import scan_file_range

    if window:
        monkeypatch.setattr(finite, "SCAN_CHUNK_BYTES", window)

    rng = np.random.default_rng(7)
    raw = rng.integers(0, np.iinfo(np.dtype(bits)).max, size=300_001, dtype=np.dtype(bits), endpoint=True)
    raw[:5000] = 0
    if dtype == "BF16":
        expected = ~np.isfinite(to_float32(raw, "BF16"))
    elif dtype == "F16":
        expected = ~np.isfinite(raw.view("<f2"))
    elif dtype == "F32":
        expected = ~np.isfinite(raw.view("<f4"))
    elif dtype == "F64":
        expected = ~np.isfinite(raw.view("<f8"))
    elif dtype == "F8_E5M2":  # e5m2: exponent 11111 is Inf/NaN (IEEE-like)
        expected = ((raw >> 2) & 0x1F) == 0x1F
    else:  # e4m3fn: S.1111.111 is NaN, no Inf
        expected = (raw & 0x7F) == 0x7F
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 4104 + raw.tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        found = scan_file_range(fd, 4104, raw.nbytes, dtype)
        zeros = scan_file_range(fd, 4104, 5000 * raw.itemsize, dtype)
    finally:
        os.close(fd)
    assert found is not None and zeros is not None
    assert found.nonfinite == int(expected.sum()) > 0
    assert found.first_nonfinite == int(np.argmax(expected))
    assert found.nonzero and not zeros.nonzero and zeros.nonfinite == 0


def test_dry_run_says_the_nan_check_did_not_run(drafter, tmp_path):
    src = drafter(producer="specforge")
    poke(src, "fc.weight", (0, 0), float("nan"))
    report = convert(src, tmp_path / "out", "vllm", dry_run=True)
    assert any("NaN/Inf check not run" in n for n in report.notes)
    assert not (tmp_path / "out").exists()


def test_upgrade_and_downgrade_refuse_nan_weights_too(drafter, tmp_path):
    """upgrade/downgrade write through convert's writer, so they inherit the check and --no-numeric."""
    src = drafter(producer="vllm")
    poke(src, "fc.weight", (0, 1), float("nan"))
    up = CliRunner().invoke(cli, ["upgrade", str(src), str(tmp_path / "up")])
    assert up.exit_code == 1 and "[EC060]" in up.stderr and not (tmp_path / "up").exists()
    ok = CliRunner().invoke(cli, ["upgrade", str(src), str(tmp_path / "up"), "--no-numeric"])
    assert ok.exit_code == 0, ok.output
    down = CliRunner().invoke(cli, ["downgrade", str(tmp_path / "up"), str(tmp_path / "down"), "--allow-lossy"])
    assert down.exit_code == 1 and "[EC060]" in down.stderr and not (tmp_path / "down").exists()
    assert debris(tmp_path) == []
