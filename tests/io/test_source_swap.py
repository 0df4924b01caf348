"""Issue 28 item 17: a source directory renamed or replaced while ``convert`` reads it is one line naming the
file, exit 2, and nothing written; never an internal FileNotFoundError, never shards from two sources."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from eagleconv import convert
from eagleconv.cli.main import cli
from eagleconv.io import reader


def sharded(drafter, tmp_path, name: str, seed: int):
    """A 4-shard vllm checkpoint, so the convert opens shards one after another."""
    out = tmp_path / name
    convert(drafter(producer="vllm", seed=seed), out, "vllm", max_shard_size=8192)
    assert len(list(out.glob("*.safetensors"))) > 2
    return out


@pytest.mark.parametrize("swap", ["renamed away", "replaced by another checkpoint", "rewritten in place"])
@pytest.mark.parametrize("when", [1, 2])
def test_a_source_swapped_during_convert_is_one_line_and_nothing_written(drafter, tmp_path, monkeypatch, swap, when):
    src = sharded(drafter, tmp_path, "src", seed=1)
    other = sharded(drafter, tmp_path, "other", seed=2)
    dst = tmp_path / "out"
    real = reader.Checkpoint._fd_for
    opened: list[object] = []

    def swapping(self, loc):
        path = getattr(loc, "path", loc)  # a _Location (or, before issue 28, its path)
        if self._fd_path != path:
            opened.append(path)
            if len(opened) == when + 1:  # after `when` shards were read: the next open finds the swap
                if swap == "renamed away":
                    src.rename(tmp_path / "moved")
                elif swap == "replaced by another checkpoint":
                    src.rename(tmp_path / "moved")
                    shutil.copytree(other, src)
                else:
                    data = bytearray(path.read_bytes())
                    data[-1] ^= 1
                    path.write_bytes(bytes(data))
        return real(self, loc)

    monkeypatch.setattr(reader.Checkpoint, "_fd_for", swapping)
    result = CliRunner().invoke(cli, ["convert", str(src), str(dst), "--to", "speculators", "--allow-no-verifier"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "changed while being read" in lines[0], result.output
    assert str(opened[-1]) in lines[0]  # names the shard
    assert "internal error" not in result.output
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if ".eagleconv-" in p.name) == []


def test_a_shard_replaced_between_its_size_check_and_its_header(drafter, tmp_path, monkeypatch):
    """The header read is bracketed by two stats: a file swapped under it is refused, not half-trusted."""
    src = sharded(drafter, tmp_path, "src", seed=1)
    other = sharded(drafter, tmp_path, "other", seed=2)
    real = reader.read_header
    swapped: list[object] = []

    def header_then_swap(path):
        header = real(path)
        if not swapped:
            swapped.append(path)
            shutil.copyfile(other / path.name, tmp_path / "new")
            (tmp_path / "new").replace(path)
        return header

    monkeypatch.setattr(reader, "read_header", header_then_swap)
    result = CliRunner().invoke(cli, ["inspect", str(src)])
    assert result.exit_code == 2, result.output
    assert "changed while being read" in result.output and swapped[0].name in result.output
