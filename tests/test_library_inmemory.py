"""Library calls take what a training loop holds: an in-memory (state_dict, config), config a dict or a
transformers PretrainedConfig (issue 17, item 7).  Seeded tiny drafters (eagleconv.synthetic), real
safetensors output, and push to the loopback Hub (tests/support/fake_hub.py)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import eagleconv
from eagleconv.errors import ArgumentTypeError, DestinationError, UsageError
from eagleconv.synthetic import DrafterRecipe, make_drafter, producer_config, producer_tensors
from tests.support.hub import hub  # noqa: F401  (the loopback Hub fixture)

CLEAN = DrafterRecipe(producer="speculators", eagle31=True)  # names a Hub verifier: push has no warning to refuse


def held(recipe: DrafterRecipe) -> tuple[dict[str, torch.Tensor], dict]:
    """What training code holds: the drafter's tensors and config, never written anywhere."""
    return producer_tensors(recipe), producer_config(recipe)


def as_transformers_config(config: dict):
    from transformers import LlamaConfig, PretrainedConfig

    return LlamaConfig(**config) if "hidden_size" in config else PretrainedConfig(**config)


def tensors_of(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def snapshot(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in state.items()}


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name


# -- upgrade / downgrade / convert ----------------------------------------------------------------

@pytest.mark.parametrize("config_form", ["dict", "transformers"])
def test_upgrade_of_a_state_dict_writes_what_upgrade_of_its_directory_writes(tmp_path, config_form):
    recipe = DrafterRecipe(producer="vllm")
    state, config = held(recipe)
    before = snapshot(state)
    source = make_drafter(tmp_path / "src", recipe)  # the same seeded drafter, saved by its producer
    from_disk = eagleconv.upgrade(source, tmp_path / "from-disk")
    given = config if config_form == "dict" else as_transformers_config(config)
    from_memory = eagleconv.upgrade(state, tmp_path / "from-memory", config=given)
    assert from_memory.ok and from_memory.source == "<state_dict>"
    assert (from_memory.eagle_version_before, from_memory.eagle_version_after) == ("3", "3.1")
    assert from_memory.divergence == from_disk.divergence and from_memory.changes == from_disk.changes
    assert (tmp_path / "from-memory" / "model.safetensors").read_bytes() == \
        (tmp_path / "from-disk" / "model.safetensors").read_bytes()
    written = json.loads((tmp_path / "from-memory" / "config.json").read_text())
    assert written["fc_norm"] is True and written["norm_output"] is True
    assert eagleconv.validate(tmp_path / "from-memory").ok
    assert_same_tensors(state, before)  # the caller's tensors are read, never changed


def test_downgrade_and_convert_take_a_state_dict_with_a_transformers_config(tmp_path):
    recipe = DrafterRecipe(producer="vllm", eagle31=True)
    state, config = held(recipe)
    source = make_drafter(tmp_path / "src", recipe)
    down = eagleconv.downgrade(state, tmp_path / "down", config=as_transformers_config(config), allow_lossy=True)
    assert down.ok and down.source == "<state_dict>" and down.eagle_version_after == "3"
    assert tensors_of(tmp_path / "down").keys() == tensors_of(
        Path(eagleconv.downgrade(source, tmp_path / "down-disk", allow_lossy=True).destination)).keys()
    assert_same_tensors(tensors_of(tmp_path / "down"), tensors_of(tmp_path / "down-disk"))
    verifier = "meta-llama/Llama-3.1-8B-Instruct"
    converted = eagleconv.convert(state, tmp_path / "spec", "speculators", config=as_transformers_config(config),
                                  verifier=verifier)
    assert converted.ok and converted.source == "<state_dict>" and converted.destination_format == "speculators"
    out = eagleconv.validate(tmp_path / "spec", engines="speculators")
    assert out.ok and out.format == "speculators"
    # every tensor is the caller's, under the speculators name the plan gives it
    renamed = {row.destination: row.source for row in converted.plan if row.action == "copy"}
    written = tensors_of(tmp_path / "spec")
    for dest, src in renamed.items():
        assert torch.equal(written[dest], state[src]), dest


def test_a_dry_run_of_a_state_dict_plans_without_writing(tmp_path):
    state, config = held(DrafterRecipe(producer="vllm"))
    report = eagleconv.convert(state, tmp_path / "out", "speculators", config=config, dry_run=True,
                               verifier="meta-llama/Llama-3.1-8B-Instruct")
    assert report.dry_run and report.source == "<state_dict>" and report.plan
    assert not (tmp_path / "out").exists()


def test_an_error_about_a_state_dict_names_no_file(tmp_path):
    recipe = DrafterRecipe(producer="vllm")
    state, config = held(recipe)
    del config["num_attention_heads"]  # a shape-bearing field the tensors do not fix: never defaulted
    with pytest.raises(eagleconv.EagleconvError) as caught:
        eagleconv.upgrade(state, tmp_path / "out", config=config)
    assert str(caught.value).startswith("<state_dict>: source has 1 error finding(s), first: [EC004] "
                                        "num_attention_heads is absent")
    assert caught.value.exit_code == 1
    assert not (tmp_path / "out").exists()


# -- typed errors for what does not go together -----------------------------------------------------

def _calls(tmp_path: Path):
    out = tmp_path / "out"
    return {
        "upgrade": lambda source, **kw: eagleconv.upgrade(source, out, **kw),
        "downgrade": lambda source, **kw: eagleconv.downgrade(source, out, **kw),
        "convert": lambda source, **kw: eagleconv.convert(source, out, "vllm", **kw),
        "push": lambda source, **kw: eagleconv.push(source, "org/name", dry_run=True, **kw),
        "validate": lambda source, **kw: eagleconv.validate(source, **kw),
    }


@pytest.mark.parametrize("call", ["upgrade", "downgrade", "convert", "push", "validate"])
def test_mismatched_source_and_config_are_type_errors_naming_the_argument(tmp_path, call, hub):
    run = _calls(tmp_path)[call]
    state, config = held(DrafterRecipe(producer="vllm"))
    directory = make_drafter(tmp_path / "src", DrafterRecipe(producer="vllm"))
    cases = [
        (lambda: run(state), r"^config is required with an in-memory state dict"),
        (lambda: run(directory, config=config), r"^config goes with an in-memory state dict; .* is a checkpoint "
                                                r"directory, whose own config\.json is read"),
        (lambda: run(state, config=3), r"^config must be a dict, a config\.json path or a config object"),
        (lambda: run(42, config=config), r" must be a str or os\.PathLike, not int \(42\): a checkpoint "
                                         r"directory, or an in-memory state dict \{name: tensor\} with its config"),
        (lambda: run({1: state["fc.weight"]}, config=config), r"state dict keys must be tensor names \(str\)"),
    ]
    for case, message in cases:
        with pytest.raises(ArgumentTypeError, match=message) as caught:
            case()
        assert isinstance(caught.value, TypeError) and isinstance(caught.value, UsageError)
        assert caught.value.exit_code == 2
    assert not (tmp_path / "out").exists() and hub.requests == []
    assert sorted(os.listdir(tempfile.gettempdir())) == []  # push wrote nothing, not even its staging


# -- push ---------------------------------------------------------------------------------------------

def test_push_of_a_state_dict_publishes_exactly_it_and_leaves_nothing(hub):
    state, config = held(DrafterRecipe(producer="vllm", eagle31=True))
    pretrained = as_transformers_config(config)  # a LlamaConfig, as a trainer builds it
    report = eagleconv.push(state, "org/trained", config=pretrained, endpoint=hub.url,
                            base_model="meta-llama/Llama-3.1-8B-Instruct")
    assert report.ok and report.error is None, report.error
    assert report.source == "<state_dict>" and report.validation.path is None and hub.commit_posts() == 1
    remote = hub.files("org/trained")
    assert sorted(e.path for e in report.files) == ["README.md", "config.json", "model.safetensors"]
    published = Path(tempfile.mkdtemp()) / "model.safetensors"
    published.write_bytes(remote["model.safetensors"])
    assert_same_tensors(load_file(str(published)), state)
    assert json.loads(remote["config.json"]) == json.loads(json.dumps(pretrained.to_dict()))
    assert report.base_model == "meta-llama/Llama-3.1-8B-Instruct"
    # the temporary checkpoint and push's staging copy are gone, and no report field names them
    leftovers = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(".eagleconv")]
    assert leftovers == []
    assert tempfile.gettempdir() not in report.model_dump_json()


def test_push_of_a_state_dict_runs_the_same_gate(hub):
    state, config = held(CLEAN)
    config["norm_before_fc"] = True  # with fc_norm: EC020, an error finding
    report = eagleconv.push(state, "org/bad", config=config)
    assert report.refused and not report.ok and hub.requests == []
    assert any(f.code == "EC020" and f.severity == "error" for f in report.validation.findings)
    assert report.source == "<state_dict>" and tempfile.gettempdir() not in report.model_dump_json()
    assert [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(".eagleconv")] == []
    # a dry run keeps the staged copy, as for a directory
    dry = eagleconv.push(*held(CLEAN)[:1], "org/dry", config=held(CLEAN)[1], dry_run=True)
    assert dry.ok and dry.staged is not None and (Path(dry.staged) / "model.safetensors").is_file()
    assert hub.requests == []


def test_push_refuses_a_config_json_cannot_hold_before_writing(hub):
    state, config = held(CLEAN)
    for bad, message in [({**config, "dtype": torch.bfloat16}, r"^config: dtype is a dtype \(torch.bfloat16\), which a config.json cannot hold"),
                         ({**config, "rope_scale": float("nan")}, r"^config: invalid JSON: non-standard JSON "
                                                                  r"constant NaN")]:
        with pytest.raises(eagleconv.EagleconvError, match=message) as caught:
            eagleconv.push(state, "org/name", config=bad)
        assert caught.value.exit_code == 2
    assert hub.requests == [] and os.listdir(tempfile.gettempdir()) == []


def test_push_of_a_state_dict_on_a_full_tmpdir_names_tmpdir(hub, monkeypatch):
    import errno

    import eagleconv.io.staging as staging

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(staging.os, "write", full)
    state, config = held(CLEAN)
    with pytest.raises(DestinationError) as caught:
        eagleconv.push(state, "org/name", config=config)
    assert caught.value.path == tempfile.gettempdir() and "no space left" in caught.value.message
    assert caught.value.errno == errno.ENOSPC and hub.requests == []
    assert os.listdir(tempfile.gettempdir()) == []


# -- the one single-file atomic write --------------------------------------------------------------

def test_write_file_atomically_publishes_whole_or_leaves_the_old_file(tmp_path):
    from eagleconv.io.staging import write_file_atomically

    path = tmp_path / "calib.safetensors"
    write_file_atomically(path, [b"old"], what="the file")
    with pytest.raises(UsageError, match="^.*the file already exists"):
        write_file_atomically(path, [b"new"], what="the file")

    def interrupted():
        yield b"half of the new"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_file_atomically(path, interrupted(), what="the file", overwrite=True)
    assert path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == [path.name]
    write_file_atomically(path, [b"new ", memoryview(b"bytes")], what="the file", overwrite=True)
    assert path.read_bytes() == b"new bytes" and sorted(os.listdir(tmp_path)) == [path.name]
    with pytest.raises(DestinationError, match="cannot write the file: No such file or directory") as caught:
        write_file_atomically(tmp_path / "missing" / "f", [b"x"], what="the file")
    assert isinstance(caught.value, OSError) and caught.value.path == str(tmp_path / "missing" / "f")


# -- validate and lint take a transformers config; ignore takes one code -------------------------------

def state_dict_and_config(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors")), json.loads((path / "config.json").read_text())


def test_validate_and_lint_take_a_transformers_config(drafter):
    from transformers import LlamaConfig

    sd, cfg = state_dict_and_config(drafter(producer="vllm"))
    config = LlamaConfig(**cfg)
    as_object = eagleconv.validate(sd, config=config, numeric=False)
    as_dict = eagleconv.validate(sd, config=config.to_dict(), numeric=False)
    assert as_object.ok and as_object.model_dump() == as_dict.model_dump()
    assert as_object.format == "vllm" and as_object.aux_layer_ids == cfg["eagle_aux_hidden_state_layer_ids"]
    assert eagleconv.lint(config).model_dump() == eagleconv.lint(config.to_dict()).model_dump()


@pytest.mark.parametrize("call", [lambda sd: eagleconv.validate(sd, config=3),
                                  lambda sd: eagleconv.lint(["not", "a", "config"])])
def test_a_config_of_the_wrong_type_is_a_type_error_naming_it(drafter, call):
    from eagleconv.errors import ArgumentTypeError

    sd, _ = state_dict_and_config(drafter(producer="vllm"))
    with pytest.raises(TypeError, match=r"^config must be a dict, a config\.json path or a config object") as info:
        call(sd)
    assert isinstance(info.value, ArgumentTypeError) and isinstance(info.value, UsageError)


def test_ignore_takes_one_code_as_a_string(drafter):
    src = drafter(producer="vllm")
    report = eagleconv.validate(src, numeric=False)
    code = next(f.code for f in report.findings if f.severity != "error")  # a code there is to ignore
    one = eagleconv.validate(src, numeric=False, ignore=code)
    assert one.model_dump() == eagleconv.validate(src, numeric=False, ignore=[code]).model_dump()
    assert code in {f.code for f in one.ignored} and code not in {f.code for f in one.findings}
    assert eagleconv.lint(src, ignore=code).model_dump() == eagleconv.lint(src, ignore=(code,)).model_dump()


@pytest.mark.parametrize("ignore,message", [(23, "ignore must be a finding code or an iterable of codes, not int"),
                                            (["EC023", 5], "ignore: finding codes are strings, not int")])
def test_ignore_of_the_wrong_type_is_a_type_error_naming_it(drafter, ignore, message):
    src = drafter(producer="vllm")
    with pytest.raises(TypeError, match=message):
        eagleconv.validate(src, numeric=False, ignore=ignore)
