"""--overwrite replaces only a checkpoint: anything else at the destination is refused and left as it was."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from eagleconv import convert
from eagleconv.cli.main import cli
from eagleconv.synthetic import DrafterRecipe, make_drafter
from tests.conftest import read_json
from tests.support.files import debris


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


def test_the_caller_says_what_is_a_checkpoint(tmp_path):
    """io asks the caller that allows --overwrite whether a directory holds a checkpoint (``recognise``: convert and
    pull pass readers.loading.recognise_checkpoint), not a function set at import time; without it, no overwrite."""
    from eagleconv.errors import UsageError
    from eagleconv.io.staging import StagedDirectory

    dst = tmp_path / "d"
    dst.mkdir()
    (dst / "config.json").write_text("{}")
    asked = []

    def refuse(directory, names, shown):
        asked.append((directory, names, shown))
        raise UsageError("not a drafter", shown)

    with pytest.raises(UsageError, match="not a drafter"):
        StagedDirectory(dst, overwrite=True, recognise=refuse)
    assert asked == [(dst, ["config.json"], dst)] and (dst / "config.json").read_text() == "{}"
    with pytest.raises(TypeError, match="needs recognise"):
        StagedDirectory(dst, overwrite=True)
    with StagedDirectory(dst, overwrite=True, recognise=lambda *_: None) as path:
        (path / "config.json").write_text("new")
    assert (dst / "config.json").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["d"]
