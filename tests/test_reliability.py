"""Issue 10, defects 1-3: convert refuses NaN/Inf weights, --overwrite replaces only checkpoints,
interrupted conversions clean up (and the next run cleans up after a killed one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from conftest import read_json
from eagleconv import convert
from eagleconv.cli.main import cli
from eagleconv.errors import ConversionError, UsageError
from eagleconv.io.dtypes import to_float32
from eagleconv.synthetic import DrafterRecipe, make_drafter

REPO = Path(__file__).resolve().parents[1]


def poke(directory: Path, name: str, index: tuple[int, ...], value: float) -> None:
    """Set one element of a stored tensor (test setup only)."""
    path = directory / "model.safetensors"
    tensors = load_file(path)
    tensors[name][index] = value
    save_file(tensors, path, metadata={"format": "pt"})


def debris(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".eagleconv-" in p.name)


# -- defect 1: NaN/Inf ------------------------------------------------------------------------------


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


# -- defect 2: --overwrite replaces only a checkpoint ---------------------------------------------


@pytest.mark.parametrize("make", ["file", "subdir", "git", "readme-only", "symlink"])
def test_overwrite_refuses_what_is_not_a_checkpoint(drafter, tmp_path, make):
    src = drafter(producer="specforge")
    dst = tmp_path / "d"
    if make == "symlink":
        real = tmp_path / "real"
        convert(src, real, "vllm")
        dst.symlink_to(real)
        keep = real / "config.json"
    else:
        dst.mkdir()
        if make == "file":
            keep = dst / "keep.txt"
        elif make == "subdir":
            (dst / "config.json").write_text("{}")
            (dst / "runs").mkdir()
            keep = dst / "runs" / "log.txt"
        elif make == "git":
            (dst / "model.safetensors").write_bytes(b"not really")
            (dst / ".git").mkdir()
            keep = dst / ".git" / "HEAD"
        else:
            keep = dst / "README.md"
    if make != "symlink":
        keep.write_text("keep")
    before = keep.read_bytes()
    result = CliRunner().invoke(cli, ["convert", str(src), str(dst), "--to", "vllm", "--overwrite"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "nothing was deleted" in result.stderr and str(dst) in result.stderr
    assert keep.read_bytes() == before
    assert debris(tmp_path) == []


@pytest.mark.parametrize("previous", ["eagleconv-output", "other-checkpoint", "empty"])
def test_overwrite_replaces_a_checkpoint(drafter, tmp_path, previous):
    src = drafter(producer="specforge")
    dst = tmp_path / "d"
    if previous == "eagleconv-output":
        convert(drafter(producer="torchspec"), dst, "speculators")
    elif previous == "other-checkpoint":
        make_drafter(dst, DrafterRecipe(producer="eagle"))  # pytorch_model.bin + config.json
        (dst / "tokenizer.json").write_text("{}")
    else:
        dst.mkdir()
    convert(src, dst, "vllm", overwrite=True)
    assert sorted(p.name for p in dst.iterdir()) == ["config.json", "model.safetensors"]
    assert read_json(dst / "config.json")["eagleconv"]["layout"] == "vllm"
    assert debris(tmp_path) == []


# -- defect 3: signals, stale staging, interrupted --overwrite ------------------------------------

# Runs the CLI in a child whose writer parks inside the staging directory (after the first shard is
# copied) and says so, so the test can signal it at a known moment.  The flag file lists the threads (other
# than the main one) that do not block SIGINT/SIGTERM/SIGHUP: Linux may hand the signal to any such thread,
# and then the main thread's sleep (standing in for a long fsync) is not interrupted.
_PARKED_CHILD = """
import os, signal, sys, threading, time
from pathlib import Path
from eagleconv.io import writer
from eagleconv.cli.main import main
flag = Path(sys.argv[1])
real = writer.CheckpointWriter._write_shard
def unblocked_threads():
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    names = {t.native_id: t.name for t in threading.enumerate()}
    found = []
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == os.getpid():
            continue
        status = Path(f"/proc/self/task/{tid}/status").read_text()
        blocked = int(next(l for l in status.splitlines() if l.startswith("SigBlk:")).split()[1], 16)
        if blocked & wanted != wanted:
            found.append(names.get(int(tid), tid))
    return found
def parked(*args, **kwargs):
    real(*args, **kwargs)
    flag.write_text(" ".join(map(str, unblocked_threads())) or "-")
    time.sleep(60)
writer.CheckpointWriter._write_shard = staticmethod(parked)
sys.argv = ["eagleconv"] + sys.argv[2:]
main()
"""


def _interrupt_parked_writer(args: list[str], flag: Path, sig: int) -> subprocess.CompletedProcess:
    """Run ``eagleconv ARGS`` in a child parked after its writer's first shard, send it ``sig`` there (checking the
    staging directory exists and no helper thread can take the signal) and wait for it to exit."""
    argv = [sys.executable, "-c", _PARKED_CHILD, str(flag), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    while not flag.read_text():  # created, not yet written
        time.sleep(0.01)
    assert flag.read_text() == "-", f"helper threads that can take the signal: {flag.read_text()}"
    assert any(name.endswith(".partial") for name in debris(flag.parent))
    child.send_signal(sig)
    out, err = child.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


# Every command that writes through CheckpointWriter: (source recipe, arguments after SRC DST), each output split
# into 4 KB shards so the child is parked with shards still to write.
WRITERS = {
    "convert": (dict(producer="specforge"), ["--to", "vllm"]),
    "upgrade": (dict(producer="vllm"), []),
    "downgrade": (dict(producer="vllm", eagle31=True), ["--allow-lossy"]),
}


@pytest.mark.parametrize("command", sorted(WRITERS))
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_signal_while_writing_cleans_up_and_keeps_the_previous_output(drafter, tmp_path, command, sig, code,
                                                                      overwrite):
    recipe, extra = WRITERS[command]
    src = drafter(**recipe)
    dst = tmp_path / "out"
    previous = None
    if overwrite:
        convert(drafter(producer="torchspec"), dst, "vllm")
        previous = {p.name: p.read_bytes() for p in dst.iterdir()}
    args = [command, str(src), str(dst), *extra, "--max-shard-size", "4KB"] + (["--overwrite"] if overwrite else [])
    result = _interrupt_parked_writer(args, tmp_path / "parked", sig)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.strip().startswith("eagleconv: interrupted")
    assert debris(tmp_path) == []
    if previous is None:
        assert not dst.exists()
    else:
        assert {p.name: p.read_bytes() for p in dst.iterdir()} == previous


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_next_run_removes_staging_of_dead_owners_only(drafter, tmp_path):
    from eagleconv.io import staging

    src = drafter(producer="specforge")
    dst = tmp_path / "out"
    convert(drafter(producer="torchspec"), dst, "vllm")  # present: a dead .old is debris, not a lost output
    host = staging._host_tag()
    me, my_start = os.getpid(), staging.process_start(os.getpid())
    names = {
        "dead": f".out.eagleconv-{host}-{_dead_pid()}-123-aaaa0001.partial",
        "reused pid": f".out.eagleconv-{host}-{me}-{int(my_start) + 1}-aaaa0002.partial",  # my pid, another start
        "dead old": f".out.eagleconv-{host}-{_dead_pid()}-123-aaaa0003.old",
        "live": f".out.eagleconv-{host}-{me}-{my_start}-aaaa0004.partial",
        "other host": f".out.eagleconv-{'0' * 8 if host != '0' * 8 else '1' * 8}-{_dead_pid()}-1-aaaa0005.partial",
        "legacy": ".out.eagleconv-0123abcd.partial",
        "other destination": f".other.eagleconv-{host}-{_dead_pid()}-123-aaaa0006.partial",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"half")
    report = convert(src, dst, "vllm", overwrite=True)
    left = set(debris(tmp_path))
    # a dead owner's debris goes whatever destination it was for (issue 18: a retry under another name)
    for kind in ("dead", "reused pid", "dead old", "other destination"):
        assert names[kind] not in left, kind
    for kind in ("live", "other host", "legacy"):
        assert names[kind] in left, kind
    assert sum("no longer running" in n for n in report.notes) == 4
    assert any(names["legacy"] in n and "left" in n for n in report.notes)


def test_interrupted_non_atomic_overwrite_is_restored_by_the_next_run(drafter, tmp_path, monkeypatch):
    """Where RENAME_EXCHANGE is missing the old output is set aside first: a kill between the two renames
    leaves the destination absent, and the next run puts the previous output back before anything else."""
    from eagleconv.io import staging

    dst = tmp_path / "out"
    convert(drafter(producer="torchspec"), dst, "vllm")
    previous = {p.name: p.read_bytes() for p in dst.iterdir()}
    aside = tmp_path / f".out.eagleconv-{staging._host_tag()}-{_dead_pid()}-99-abcd0001.old"
    os.rename(dst, aside)  # the state a SIGKILL between the renames leaves
    (tmp_path / f".out.eagleconv-{staging._host_tag()}-{_dead_pid()}-99-abcd0002.partial").mkdir()
    src = drafter(producer="specforge")
    with pytest.raises(UsageError, match="already exists"):
        convert(src, dst, "vllm")  # no --overwrite: the restored output is not replaced
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == previous
    assert debris(tmp_path) == []
    # and the fallback itself: a failure of the second rename puts the old output back at once
    monkeypatch.setattr(staging, "exchange", lambda a, b: False)
    real_rename = os.rename

    def failing(a, b):
        if Path(a).name.endswith(".partial"):
            raise OSError("simulated failure publishing")
        return real_rename(a, b)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="simulated"):
        convert(src, dst, "vllm", overwrite=True)
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == previous
    assert debris(tmp_path) == []
    monkeypatch.setattr(os, "rename", real_rename)
    convert(src, dst, "vllm", overwrite=True)  # the fallback path publishes
    assert read_json(dst / "config.json")["eagleconv"]["converted_from"] == "specforge"
    assert debris(tmp_path) == []


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
