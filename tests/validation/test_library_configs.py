"""Issue 28 item 13: configs a library caller builds in memory are checked like config.json files (JSON values
only, depth, size, surrogates, non-finite numbers), and validate/lint's arguments are typed and ranged."""

from __future__ import annotations

import time

import pytest
import torch

import eagleconv
from eagleconv.errors import ArgumentTypeError, EagleconvError, UnsafeInputError
from eagleconv.support.jsonio import MAX_DEPTH
from eagleconv.synthetic import DrafterRecipe, producer_config, producer_tensors

RECIPE = DrafterRecipe(producer="vllm")


def held() -> tuple[dict[str, torch.Tensor], dict]:
    return producer_tensors(RECIPE), producer_config(RECIPE)


def deep(levels: int) -> dict:
    out: dict = {}
    cur = out
    for _ in range(levels):
        cur["k"] = {}
        cur = cur["k"]
    return out


def cyclic() -> dict:
    out: dict = {"a": 1}
    out["self"] = out
    return out


def shared(levels: int) -> dict:
    """Two references to one sub-dict per level: small in memory, 2**levels values once written."""
    node: dict = {"leaf": 1}
    for _ in range(levels):
        node = {"a": node, "b": node}
    return node


BAD_VALUES = [
    ("torch_dtype", torch.float32, ArgumentTypeError, r"^config: torch_dtype is a dtype \(torch\.float32\).*\"float32\""),
    ("eagle_aux_hidden_state_layer_ids", {1, 2, 3}, ArgumentTypeError, r"^config: eagle_aux_hidden_state_layer_ids is a set"),
    ("model_type", b"llama", ArgumentTypeError, r"^config: model_type is a bytes"),
    ("model_type", "\ud800", UnsafeInputError, r"^config: invalid JSON: model_type holds a lone surrogate"),
    ("rms_norm_eps", float("inf"), UnsafeInputError, r"^config: invalid JSON: non-standard JSON constant Infinity"),
    ("extra", deep(5000), UnsafeInputError, rf"^config: nested deeper than {MAX_DEPTH} levels \(or cyclic\) at extra"),
    ("extra", cyclic(), UnsafeInputError, rf"^config: nested deeper than {MAX_DEPTH} levels \(or cyclic\) at extra"),
    ("extra", shared(60), UnsafeInputError, r"^config: holds more than \d+ values"),
    ("extra", {(1, 2): "tuple key"}, ArgumentTypeError, r"^config: extra has the key \(1, 2\) of type tuple"),
]


@pytest.mark.parametrize("key,value,error,message", BAD_VALUES, ids=[f"{k}-{type(v).__name__}-{i}"
                                                                    for i, (k, v, _, _) in enumerate(BAD_VALUES)])
@pytest.mark.parametrize("api", ["lint", "validate", "convert"])
def test_a_config_a_file_could_not_hold_is_one_clean_error(tmp_path, api, key, value, error, message):
    state, config = held()
    config[key] = value
    started = time.monotonic()
    with pytest.raises(error, match=message) as caught:
        if api == "lint":
            eagleconv.lint(config)
        elif api == "validate":
            eagleconv.validate(state, config, numeric=False)
        else:
            eagleconv.convert(state, tmp_path / "out", "vllm", config=config)
    assert time.monotonic() - started < 30  # bounded: no walk over 2**60 values, no RecursionError
    assert isinstance(caught.value, EagleconvError) and caught.value.exit_code == 2
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_int_keys_are_written_as_strings_as_transformers_does():
    """transformers' to_dict() has id2label {0: ...}: a file holds "0", so the config is read as that file."""
    config = {**producer_config(RECIPE), "id2label": {0: "LABEL_0"}}
    assert eagleconv.lint(config).format is not None
    clash = {**producer_config(RECIPE), "id2label": {0: "a", "0": "b"}}
    with pytest.raises(UnsafeInputError, match="duplicate key '0'"):
        eagleconv.lint(clash)


@pytest.mark.parametrize("api", ["lint", "validate"])
@pytest.mark.parametrize("argument,value,message", [
    ("tp", "2", r"^tp must be an int .* not str \('2'\)"),
    ("tp", 2.0, r"^tp must be an int .* not float"),
    ("tp", True, r"^tp must be an int .* not bool"),
    ("target", 5, r"^target must be a str or os\.PathLike, not int \(5\)"),
])
def test_argument_types_are_argument_type_errors(drafter, api, argument, value, message):
    src = drafter(producer="vllm")
    call = (lambda **kw: eagleconv.lint(src / "config.json", **kw)) if api == "lint" else \
        (lambda **kw: eagleconv.validate(src, numeric=False, **kw))
    with pytest.raises(ArgumentTypeError, match=message):
        call(**{argument: value})


@pytest.mark.parametrize("tp", [0, -2])
def test_a_tp_below_one_is_an_error_finding(drafter, tp):
    src = drafter(producer="vllm")
    for report in (eagleconv.validate(src, numeric=False, tp=tp), eagleconv.lint(src, tp=tp)):
        assert not report.ok
        found = [f for f in report.findings if f.code == "EC051"]
        assert found and found[0].severity == "error" and f"--tp {tp}" in found[0].message
    assert eagleconv.validate(src, numeric=False, tp=1).ok
