"""GGUF has one home and one path (issue 34): convert asks no layout which it is, a layout names its writer, io opens
a GGUF with what its caller passes (no hook), and the target's config.json is read once, by the one reader."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")

import eagleconv.conversion  # noqa: E402
from eagleconv.conversion import convert  # noqa: E402
from eagleconv.errors import FormatError  # noqa: E402
from eagleconv.formats.base.output import CheckpointOutput  # noqa: E402
from eagleconv.formats.vllm import VllmLayout  # noqa: E402
from eagleconv.gguf.gguf_file import GgufCheckpoint, open_if_gguf  # noqa: E402
from eagleconv.gguf.gguf_target import read_target  # noqa: E402
from eagleconv.io.reader import open_checkpoint  # noqa: E402
from tests.formats.test_gguf import target_for  # noqa: E402

PACKAGE = Path(eagleconv.conversion.__file__).parent
TINY = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair" / "eagle3"


def _code_words(path: Path) -> set[str]:
    """Every name, attribute and string constant of a module's code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.alias):
            words.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            words.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.add(node.value)
    return words


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_the_conversion_never_asks_for_gguf(module: str) -> None:
    """No branch, import or name of GGUF in eagleconv/conversion/: the layout's writer does that part."""
    assert not [w for w in _code_words(PACKAGE / module) if "gguf" in w.lower()]


def test_conversion_re_exports_nothing() -> None:
    assert not {"Computed", "Transform", "_derive", "output_findings", "plan_conversion"} & set(vars(eagleconv.conversion))


class Recording(CheckpointOutput):
    """The default writer, recording what convert hands its storage step."""

    seen: list[tuple[str, ...]] = []

    def storage(self, store, report, tensors, spec):  # type: ignore[no-untyped-def]
        Recording.seen.append(tuple(row.action for row in report.plan))
        return super().storage(store, report, tensors, spec)


def test_a_layout_names_its_writer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """convert writes through ``Layout.output``, and the plan names its storage step (it sees the planned rows)."""
    monkeypatch.setattr(VllmLayout, "output", Recording)
    Recording.seen.clear()
    report = convert(TINY, tmp_path / "out", "vllm")
    assert Recording.seen == [tuple(row.action for row in report.plan)]
    assert (tmp_path / "out" / "config.json").is_file()


def test_io_opens_a_gguf_with_the_opener_its_caller_passes(tmp_path: Path) -> None:
    """No hook (issue 34): io.reader opens a one-file checkpoint with ``open_file``, else refuses it."""
    path = tmp_path / "d.gguf"
    convert(TINY, path, "gguf", target=target_for(TINY, tmp_path))
    with pytest.raises(FormatError, match="expected a checkpoint directory"):
        open_checkpoint(path)
    store = open_checkpoint(path, open_file=open_if_gguf)
    try:
        assert isinstance(store, GgufCheckpoint) and store.config is not None
        assert store.config["gguf_architecture"] == "eagle3"
    finally:
        store.close()


def _hf_target(directory: Path) -> Path:
    from tests.formats.test_gguf_llamacpp_converter import hf_target

    return hf_target(directory, hidden=64, vocab=128, layers=4)


def test_the_target_config_is_read_once_by_the_one_reader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--target DIR: config.json is parsed once, by config.target.read_target_config (it was parsed twice)."""
    pytest.importorskip("sentencepiece")
    import eagleconv.config.target as target_module
    import eagleconv.support.jsonio as jsonio

    target = _hf_target(tmp_path / "target")
    reads: list[str] = []
    real = jsonio.load_json

    def counting(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(Path(path).name)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(jsonio, "load_json", counting)
    monkeypatch.setattr(target_module, "load_json", counting)
    called: list[Path] = []
    one_reader = target_module.read_target_config
    monkeypatch.setattr(target_module, "read_target_config", lambda p: called.append(Path(p)) or one_reader(p))
    meta = read_target(target)
    assert (meta.num_layers, meta.vocab_size, meta.hidden_size) == (4, 128, 64)
    assert reads.count("config.json") == 1 and [p.name for p in called] == ["config.json"]


def test_a_target_config_linked_outside_its_directory_is_refused(tmp_path: Path) -> None:
    """The path policy still holds for config.json now that the side-file check no longer parses it."""
    pytest.importorskip("sentencepiece")
    from tests.formats.test_gguf_hostile import convert_to_gguf

    target = _hf_target(tmp_path / "target")
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps(json.loads((target / "config.json").read_text())))
    (target / "config.json").unlink()
    (target / "config.json").symlink_to(outside)
    code, output = convert_to_gguf(target, tmp_path)
    assert code == 2 and "resolves outside" in output and "config.json" in output, output
    assert not (tmp_path / "d.gguf").exists()
