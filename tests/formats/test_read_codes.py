"""A layout read problem carries its finding code from where it is found, never from its wording (issue 16)."""

from __future__ import annotations

import json

from eagleconv.formats import get_layout, read_drafter
from eagleconv.io.reader import open_checkpoint
from eagleconv.synthetic import make_drafter
from eagleconv.validation import validate


def _read(directory):
    store = open_checkpoint(directory)
    return read_drafter(get_layout("vllm"), store.config, store.tensors)


def test_each_read_error_has_the_code_of_its_check(tmp_path):
    d = make_drafter(tmp_path / "d", producer="vllm")
    config = json.loads((d / "config.json").read_text())
    config["hidden_size"] = -8  # a value no drafter has: EC005
    (d / "config.json").write_text(json.dumps(config))
    read = _read(d)
    assert len(read.codes) == len(read.errors) and read.errors
    assert {code for code, _ in read.problems()} == {"EC005"}
    codes = {f.code for f in validate(d, numeric=False).findings if f.severity == "error"}
    assert "EC005" in codes


def test_the_code_does_not_come_from_the_text(tmp_path, monkeypatch):
    """Reworded messages keep their codes: the findings read ReadResult.codes."""
    d = make_drafter(tmp_path / "d", producer="vllm")
    config = json.loads((d / "config.json").read_text())
    config["hidden_size"] = -8
    (d / "config.json").write_text(json.dumps(config))
    read = _read(d)
    read.errors[:] = [f"reworded {i}" for i in range(len(read.errors))]
    from eagleconv.validation.structural import read_findings

    assert {f.code for f in read_findings(read) if f.message.startswith("reworded")} == {"EC005"}
