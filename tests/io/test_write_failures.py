"""Issue 18, items 6, 8, 9 and 16: what a write says and leaves when it cannot finish, and what --overwrite may replace.

Real failures only: a full tmpfs (ENOSPC), a process file-size limit (EFBIG), a read-only mount or an
immutable / unwritable directory, the working directory and a mount point as the destination (busy), a real
reader refusing a staged file.  Mounting needs root and the right to mount; where that is missing those cases are
skipped and the file-size-limit and permission cases still run.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from eagleconv import convert
from eagleconv.errors import DestinationError, EagleconvError, UsageError
from eagleconv.io import debris
from eagleconv.io.reader import open_checkpoint
from eagleconv.io.writer import CheckpointWriter
from eagleconv.synthetic import make_target_config
from tests.support.writes import assert_one_line_about, mounted_tmpfs

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str | Path, cwd: Path | None = None, file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:  # in the child: writes past the limit fail with EFBIG instead of killing it (SIGXFSZ)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "eagleconv", *map(str, args)], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300, preexec_fn=limit if file_size_limit else None)


def everything_under(directory: Path) -> dict[str, bytes | None]:
    """Every path below ``directory`` (hidden ones too), with file contents: what a failed run must not change."""
    return {str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(directory.rglob("*"))}


# -- item 6: a refused write names the real paths and leaves no parent it made --------------------------


def test_a_staged_file_the_reader_refuses_is_reported_at_the_destination(tmp_path):
    dst = tmp_path / "a" / "b" / "out"
    writer = CheckpointWriter(dst)
    with pytest.raises(EagleconvError) as caught:
        writer.write([], {"config.json": "{not json"}, verify=open_checkpoint)  # the real reader on the staged file
    assert caught.value.path == str(dst)
    assert "config.json" in str(caught.value) and "nothing was written" in str(caught.value)
    assert ".eagleconv-" not in str(caught.value)
    assert not (tmp_path / "a").exists()  # a/ and a/b/ were made for this write, and went with it
    assert list(tmp_path.iterdir()) == []


def test_a_refused_convert_of_an_infinite_rope_theta_names_a_real_path_and_leaves_no_directories(drafter, tmp_path):
    src = drafter(producer="specforge")
    text = (src / "config.json").read_text()
    infinite, found = re.subn(r'("rope_theta": )[0-9.eE+-]+', r"\g<1>1e999", text)
    assert found == 1
    (src / "config.json").write_text(infinite)
    dst = tmp_path / "new" / "deeper" / "out"
    result = run_cli("convert", src, dst, "--to", "vllm")
    err = result.stderr
    assert result.returncode == 2 and err.count("\n") == 1, err
    assert str(src) in err or str(dst) in err, err  # the source's config, or the output it would have made
    assert ".eagleconv-" not in err and "internal error" not in err, err
    assert not (tmp_path / "new").exists()


def test_a_convert_refused_mid_write_removes_the_parents_it_made(drafter, tmp_path):
    """The NaN/Inf check stops the write after the first shard: the error is about the source, and a/b/ go too."""
    from safetensors.torch import load_file

    src = drafter(producer="specforge")
    tensors = load_file(src / "model.safetensors")
    tensors["fc.weight"][0, 0] = float("nan")
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(EagleconvError, match="NaN") as caught:
        convert(src, tmp_path / "a" / "b" / "out", "vllm")
    assert caught.value.path == str(src)
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_an_existing_parent_is_kept_when_a_write_fails(tmp_path):
    (tmp_path / "kept").mkdir()
    with pytest.raises(EagleconvError):
        CheckpointWriter(tmp_path / "kept" / "out").write([], {"config.json": "{"}, verify=open_checkpoint)
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and list((tmp_path / "kept").iterdir()) == []


# -- item 8: --overwrite judges a directory by its content -------------------------------------------


def _target_model(directory: Path) -> None:
    """A target (not a drafter): a Llama config and safetensors weights without fc.weight."""
    make_target_config(directory)
    save_file({"model.embed_tokens.weight": torch.zeros(8, 4), "lm_head.weight": torch.zeros(8, 4)},
              str(directory / "model.safetensors"))


NOT_CHECKPOINTS = {
    "firmware": lambda d: (d / "firmware.bin").write_bytes(os.urandom(4096)),
    "text-torch-names": lambda d: ((d / "results.pt").write_text("epoch 3: 0.91\n"),
                                   (d / "data.pth").write_text("/data/train\n")),
    "application-config": lambda d: ((d / "config.json").write_text('{"name": "my-app", "port": 8080}\n'),
                                     (d / "README.md").write_text("# my app\n")),
    "target-model": _target_model,
}


@pytest.mark.parametrize("kind", sorted(NOT_CHECKPOINTS))
def test_overwrite_refuses_a_directory_that_only_has_checkpoint_names(drafter, tmp_path, kind):
    src = drafter(producer="specforge")
    dst = tmp_path / "d"
    dst.mkdir()
    NOT_CHECKPOINTS[kind](dst)
    before = everything_under(dst)
    result = run_cli("convert", src, dst, "--to", "vllm", "--overwrite")
    assert_one_line_about(result, dst, "not a checkpoint directory", "nothing was deleted")
    assert everything_under(dst) == before


def test_overwrite_refuses_a_drafter_config_beside_weights_that_do_not_parse(drafter, tmp_path):
    src = drafter(producer="specforge")
    dst = tmp_path / "d"
    shutil.copytree(drafter(producer="vllm"), dst)
    (dst / "model.safetensors").write_bytes(os.urandom(2048))
    before = everything_under(dst)
    with pytest.raises(UsageError, match="not a checkpoint directory.*model.safetensors"):
        convert(src, dst, "vllm", overwrite=True)
    assert everything_under(dst) == before


@pytest.mark.parametrize("previous", ["specforge-drafter", "sharded-eagleconv-output"])
def test_overwrite_replaces_a_drafter_recognised_by_content(drafter, tmp_path, previous):
    src = drafter(producer="specforge")
    dst = tmp_path / "d"
    if previous == "specforge-drafter":
        shutil.copytree(drafter(producer="specforge", seed=7), dst)  # safetensors + config, no eagleconv marker
    else:
        convert(drafter(producer="torchspec"), dst, "speculators", max_shard_size=4096)
        assert (dst / "model.safetensors.index.json").exists()
    convert(src, dst, "vllm", overwrite=True)
    assert sorted(p.name for p in dst.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((dst / "config.json").read_text())["eagleconv"]["converted_from"] == "specforge"


# -- item 9: I/O failures are one line naming the destination ----------------------------------------


def test_a_full_disk_is_one_line_naming_the_destination(drafter, tmp_path):
    src = drafter(producer="specforge")  # ~33 KB of tensors
    with mounted_tmpfs(tmp_path / "small", "size=16k") as disk:
        dst = disk / "deep" / "out"
        result = run_cli("convert", src, dst, "--to", "vllm")
        assert_one_line_about(result, dst, "no space left on the device", "bytes free", "nothing was written")
        assert list(disk.iterdir()) == []  # no staging, and not the deep/ made for it
        with pytest.raises(DestinationError) as caught:  # the library: an OSError with its errno
            convert(src, dst, "vllm")
        assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
        assert list(disk.iterdir()) == []


# every command that writes through CheckpointWriter: (source recipe, arguments after SRC DST)
WRITERS = {
    "convert": (dict(producer="specforge"), ["--to", "vllm"]),
    "upgrade": (dict(producer="vllm"), []),
    "downgrade": (dict(producer="vllm", eagle31=True), ["--allow-lossy"]),
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_file_size_limit_is_one_line_naming_the_destination(drafter, tmp_path, command):
    recipe, extra = WRITERS[command]
    src = drafter(**recipe)
    dst = tmp_path / "made" / "out"
    result = run_cli(command, src, dst, *extra, file_size_limit=8192)
    assert_one_line_about(result, dst, "file size limit", "nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_a_read_only_destination_is_one_line_naming_the_destination(drafter, tmp_path):
    src = drafter(producer="specforge")
    if os.geteuid() == 0:
        with mounted_tmpfs(tmp_path / "ro", "ro,size=1m") as disk:
            result = run_cli("convert", src, disk / "out", "--to", "vllm")
            assert_one_line_about(result, disk / "out", "read-only", "nothing was written")
    else:
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o555)
        result = run_cli("convert", src, locked / "out", "--to", "vllm")
        assert_one_line_about(result, locked / "out", "permission denied", str(locked))
        assert list(locked.iterdir()) == []


def test_a_directory_that_refuses_new_entries_is_one_line_naming_the_destination(drafter, tmp_path):
    """Permission: chattr +i stops even root (a chmod does not); without chattr, non-root uses a chmod."""
    src = drafter(producer="specforge")
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(locked)]).returncode != 0:
            pytest.skip("no chattr +i here")
    else:
        locked.chmod(0o555)
    try:
        result = run_cli("convert", src, locked / "out", "--to", "vllm")
        assert_one_line_about(result, locked / "out", "permission denied", str(locked), "nothing was written")
        assert list(locked.iterdir()) == []
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(locked)], check=True)


def test_the_working_directory_as_destination_is_refused_as_busy(drafter, tmp_path):
    src = drafter(producer="specforge")
    here = tmp_path / "here"
    convert(drafter(producer="torchspec"), here, "vllm")
    before = everything_under(tmp_path / "here")
    result = run_cli("convert", src, ".", "--to", "vllm", "--overwrite", cwd=here)
    assert_one_line_about(result, here, "busy", "nothing was deleted")
    assert everything_under(here) == before and debris.find_debris(here) == []


def test_a_mount_point_as_destination_is_one_line_naming_it(drafter, tmp_path):
    src = drafter(producer="specforge")
    with mounted_tmpfs(tmp_path / "mnt", "size=1m") as point:
        result = run_cli("convert", src, point, "--to", "vllm", "--overwrite")
        assert_one_line_about(result, point, "busy", "nothing was written")
        assert list(point.iterdir()) == [] and os.path.ismount(point)
    assert debris.find_debris(point) == []


# -- item 16: every write cleans dead owners' debris in its parent, whatever name it was for ----------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_write_cleans_the_debris_of_dead_runs_under_other_names(drafter, tmp_path):
    host = debris._host_tag()
    me, my_start = os.getpid(), debris.process_start(os.getpid())
    dead_partial = tmp_path / f".first-try.eagleconv-{host}-{_dead_pid()}-123-aaaa0001.partial"
    live_partial = tmp_path / f".running.eagleconv-{host}-{me}-{my_start}-aaaa0002.partial"
    aside = tmp_path / f".kept.eagleconv-{host}-{_dead_pid()}-123-aaaa0003.old"  # an interrupted --overwrite of kept
    for directory in (dead_partial, live_partial, aside):
        directory.mkdir()
        (directory / "model.safetensors").write_bytes(b"x" * 1000)
    (aside / "config.json").write_text("{}")

    result = run_cli("convert", drafter(producer="specforge"), tmp_path / "second-try", "--to", "vllm")
    assert result.returncode == 0, result.stderr
    assert not dead_partial.exists()
    assert live_partial.exists()  # its owner (this test) is alive
    assert not aside.exists() and sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["config.json",
                                                                                           "model.safetensors"]
    assert f"removed {dead_partial.name}" in result.stdout and "restored the previous output" in result.stdout


def test_clean_dead_debris_is_harmless_where_there_is_nothing(tmp_path):
    assert debris.clean_dead_debris(tmp_path / "missing") == []
    (tmp_path / ".plain.txt").write_text("not ours")
    assert debris.clean_dead_debris(tmp_path) == [] and (tmp_path / ".plain.txt").exists()
