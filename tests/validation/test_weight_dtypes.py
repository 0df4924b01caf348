"""Issue 18, round 3: float8 and integer weights, typed library errors, --allow-pickle's file choice, duplicate aux ids."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file as _save_file  # noqa: E402

import eagleconv  # noqa: E402
from eagleconv.errors import FormatError, UsageError  # noqa: E402

FLOAT8 = {"F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E8M0": torch.float8_e8m0fnu}
NAN_BITS = {"F8_E4M3": 0x7F, "F8_E5M2": 0x7E, "F8_E8M0": 0xFF}  # one NaN pattern of each format


# Dtypes safetensors' torch writer learnt after its floor (0.4.3 has no U64 and no F8_E8M0): such a tensor is
# written as its raw bytes (U8) and the header relabelled, which is the file a newer save_file writes.
RELABEL = {torch.uint64: "U64", torch.float8_e8m0fnu: "F8_E8M0"}


def save_file(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str]) -> None:
    """Written to a new file renamed over ``path``: tensors load_file gave may still map the old one."""
    odd = {name: t for name, t in tensors.items() if t.dtype in RELABEL}
    raw = Path(f"{path}.raw")
    _save_file({name: t.contiguous().view(torch.uint8) if name in odd else t for name, t in tensors.items()},
               str(raw), metadata=metadata)
    blob = raw.read_bytes()
    raw.unlink()
    length = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + length])
    for name, t in odd.items():
        header[name].update(dtype=RELABEL[t.dtype], shape=list(t.shape))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    raw.write_bytes(len(text).to_bytes(8, "little") + text + blob[8 + length:])
    raw.replace(path)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, timeout=300)


def retype(directory: Path, name: str, dtype: torch.dtype, *, nan_at: int | None = None) -> torch.Tensor:
    """Store tensor ``name`` of the drafter in ``dtype`` (values cast; integers scaled so they are not all 0)."""
    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    t = tensors[name]
    t = t.float().to(dtype) if dtype.is_floating_point else (t.float() * 100).to(dtype)
    if nan_at is not None:
        bits = t.view(torch.uint8).clone()
        bits.view(-1)[nan_at] = NAN_BITS[next(k for k, v in FLOAT8.items() if v == dtype)]
        t = bits.view(dtype)
    tensors[name] = t
    save_file(tensors, str(path), metadata={"format": "pt"})
    return t


def findings(result: subprocess.CompletedProcess, code: str) -> list[dict]:
    return [f for f in json.loads(result.stdout)["findings"] if f["code"] == code]


# -- item 5: float8 and integer weights -----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FLOAT8))
def test_float8_decode_table_equals_torch(name):
    from eagleconv.io.dtypes import to_float32

    import numpy as np

    bits = np.arange(256, dtype=np.uint8)
    ours = to_float32(bits, name)
    theirs = torch.arange(256, dtype=torch.uint8).view(FLOAT8[name]).float().numpy()
    assert ours.dtype == np.float32 and np.array_equal(ours, theirs, equal_nan=True)


@pytest.mark.parametrize("name", sorted(FLOAT8))
def test_float8_norm_weight_is_scanned_not_a_crash(drafter, name):
    """validate used to die with 'cannot decode F8_E5M2 values' (exit 2) on a float8 norm weight."""
    src = drafter(producer="vllm", eagle31=True)
    stored = retype(src, "fc_norm.0.weight", FLOAT8[name])
    result = cli("validate", str(src), "--json")
    assert result.returncode == 0, result.stderr
    [stats] = [f for f in findings(result, "EC062") if f["tensor"] == "fc_norm.0.weight"]
    assert f"mean {stored.float().mean().item():.4g}," in stats["message"]
    assert not findings(result, "EC053") and not findings(result, "EC060")


@pytest.mark.parametrize("name", sorted(FLOAT8))
def test_float8_nan_is_found_by_validate_and_convert(drafter, tmp_path, name):
    src = drafter(producer="vllm", eagle31=True)
    retype(src, "fc.weight", FLOAT8[name], nan_at=37)
    result = cli("validate", str(src), "--json")
    assert result.returncode == 1, result.stderr
    [nan] = findings(result, "EC060")
    assert nan["tensor"] == "fc.weight" and "1 NaN/Inf" in nan["message"] and "index 37" in nan["message"]
    out = tmp_path / "out"
    converted = cli("convert", str(src), str(out), "--to", "speculators", "--verifier", "org/target")
    assert converted.returncode == 1 and "EC060" in converted.stderr and not out.exists()


def test_e8m0_is_never_all_zero(drafter):
    """E8M0 has no zero (bits 0 are 2**-127): an fc of all-zero bits is not reported as wiped (EC061)."""
    src = drafter(producer="vllm")
    path = src / "model.safetensors"
    tensors = load_file(str(path))
    tensors["fc.weight"] = torch.zeros(tensors["fc.weight"].shape, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    save_file(tensors, str(path), metadata={"format": "pt"})
    assert not findings(cli("validate", str(src), "--json"), "EC061")
    tensors["fc.weight"] = torch.zeros(tensors["fc.weight"].shape, dtype=torch.float8_e5m2)  # control: a real zero
    save_file(tensors, str(path), metadata={"format": "pt"})
    assert findings(cli("validate", str(src), "--json"), "EC061")


@pytest.mark.parametrize("dtype", [torch.uint64, torch.int32, torch.bool])
def test_integer_weight_is_ec053(drafter, dtype):
    src = drafter(producer="vllm", eagle31=True)
    retype(src, "fc.weight", dtype)
    for extra in ((), ("--no-numeric",)):
        result = cli("validate", str(src), "--json", *extra)
        assert result.returncode == 1, result.stderr
        [f] = findings(result, "EC053")
        assert f["severity"] == "error" and f["tensor"] == "fc.weight"
        assert str(dtype).removeprefix("torch.")[0].upper() in f["message"]  # U64 / I32 / BOOL


def test_integer_vocab_maps_are_not_ec053(drafter):
    """Negative control: d2t and t2d are integer and bool by design."""
    result = cli("validate", str(drafter(producer="vllm")), "--json")
    assert result.returncode == 0 and not findings(result, "EC053")


def test_forward_on_integer_weight_is_ec071_not_a_crash(drafter):
    src = drafter(producer="vllm", eagle31=True)
    retype(src, "fc.weight", torch.uint64)
    result = cli("validate", str(src), "--forward", "--json")
    assert result.returncode == 1, result.stderr
    [f] = findings(result, "EC071")
    assert f["tensor"] == "fc.weight" and "U64" in f["message"]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_forward_reads_e8m0_weights(drafter):
    """validate --forward used to fail with 'no torch dtype for safetensors dtype F8_E8M0'."""
    src = drafter(producer="vllm", eagle31=True)
    retype(src, "fc.weight", torch.float8_e8m0fnu)
    result = cli("validate", str(src), "--forward", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["forward"] is not None and not findings(result, "EC071")


# -- item 13: typed library errors -----------------------------------------------------------------

def _state_and_config():
    from eagleconv.synthetic import DrafterRecipe, canonical_tensors, producer_config

    recipe = DrafterRecipe(producer="vllm")
    return canonical_tensors(recipe), producer_config(recipe)


@pytest.mark.parametrize("numeric", [True, False])
def test_meta_tensors_are_a_format_error(numeric):
    state, config = _state_and_config()
    meta = {k: v.to("meta") for k, v in state.items()}
    with pytest.raises(FormatError, match="meta device"):
        eagleconv.validate(meta, config, numeric=numeric)


@pytest.mark.parametrize("name", ["fc.weight", "d2t"])
def test_sparse_tensor_is_a_format_error(name):
    state, config = _state_and_config()
    state[name] = state[name].to_sparse()
    with pytest.raises(FormatError, match=f"'{name}' is torch.sparse_coo"):
        eagleconv.validate(state, config)


def test_non_string_key_is_an_argument_type_error():
    state, config = _state_and_config()
    state[3] = state["fc.weight"]
    with pytest.raises(TypeError) as caught:
        eagleconv.validate(state, config, numeric=False)
    assert isinstance(caught.value, UsageError) and "keys must be tensor names" in str(caught.value)


@pytest.mark.parametrize("engines", [None, 3, ["vllm", None]])
def test_bad_engines_is_an_argument_type_error(engines):
    state, config = _state_and_config()
    with pytest.raises(UsageError, match="engines must be") as caught:
        eagleconv.validate(state, config, engines=engines)
    assert isinstance(caught.value, TypeError) and caught.value.exit_code == 2


@pytest.mark.parametrize("bad", [None, 3])
@pytest.mark.parametrize("call, argument", [
    (lambda p, d: eagleconv.validate(p), "source"),
    (lambda p, d: eagleconv.convert(p, d / "out", "vllm"), "source"),
    (lambda p, d: eagleconv.convert(d, p, "vllm"), "destination"),
    (lambda p, d: eagleconv.inspect(p), "path"),
    (lambda p, d: eagleconv.load(p), "path"),
], ids=["validate", "convert-source", "convert-destination", "inspect", "load"])
def test_non_path_argument_is_named(drafter, call, argument, bad):
    src = drafter(producer="vllm")
    with pytest.raises(eagleconv.ArgumentTypeError) as caught:
        call(bad, src)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, UsageError)
    assert str(caught.value).startswith(f"{argument} must be a str or os.PathLike, not {type(bad).__name__}")
    assert not (src / "out").exists()


# -- item 15: explicit duplicate aux ids -------------------------------------------------------------

def _ec011(report) -> list:
    return [f for f in report.findings if f.code == "EC011" and f.engine == "vllm 0.32"]


def test_explicit_duplicate_aux_ids_are_ec011_for_vllm_032(drafter):
    """vLLM 0.32 captures each layer once: [2, 2, 1] sends 2 states to an fc built for 3 (the parity tier's
    'explicit duplicate aux ids' case: RuntimeError: shape '[-1, 768]' is invalid)."""
    from tests.conftest import edit_config

    src = drafter(producer="vllm")
    edit_config(src, eagle_aux_hidden_state_layer_ids=[2, 2, 1], num_aux_hidden_states=3)
    [f] = _ec011(eagleconv.validate(src, engines=("vllm:0.32",), numeric=False))
    assert f.severity == "error" and "[2, 2, 1]" in f.message and "2 hidden states ([1, 2])" in f.message
    assert _ec011(eagleconv.lint(src / "config.json", engines=("vllm:0.32",)))  # the config alone says it
    edit_config(src, eagle_aux_hidden_state_layer_ids=[3, 2, 1])  # control: three distinct layers
    assert not _ec011(eagleconv.validate(src, engines=("vllm:0.32",), numeric=False))


# -- item 14: --allow-pickle reads the weights only --------------------------------------------------

class NotAllowListed:  # a global torch's weights-only unpickler refuses: reading this file fails loudly
    pass


def _trainer_folder(drafter) -> Path:
    """A SafeAILab EAGLE checkpoint (pytorch_model.bin) beside a trainer's other pickles."""
    src = drafter(producer="eagle")
    torch.save({"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 1e-4, "params": [0]}]},
               src / "optimizer.pt")
    torch.save({"args": NotAllowListed()}, src / "training_args.bin")
    torch.save([torch.get_rng_state()], src / "rng_state.pth")
    return src


def test_allow_pickle_reads_only_the_weight_pickle(drafter):
    """A normal trainer folder used to fail: 'pickle does not hold a flat {name: tensor} state dict' (exit 2)."""
    src = _trainer_folder(drafter)
    result = cli("inspect", str(src), "--allow-pickle", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {t["file"] for t in report["tensors"]} == {"pytorch_model.bin"}
    [note] = [n for n in report["notes"] if "left out" in n]
    assert all(n in note for n in ("optimizer.pt", "rng_state.pth", "training_args.bin"))
    assert "pytorch_model.bin" not in note
    refused = cli("inspect", str(src))  # without the flag, the refusal names the weight file only
    assert refused.returncode == 2 and "(pytorch_model.bin)" in refused.stderr and "optimizer" not in refused.stderr


def test_allow_pickle_reads_only_the_indexed_shards(drafter, tmp_path):
    src = _trainer_folder(drafter)
    state = torch.load(src / "pytorch_model.bin", weights_only=True)
    (src / "pytorch_model.bin").unlink()
    names = sorted(state)
    half = len(names) // 2
    torch.save({n: state[n] for n in names[:half]}, src / "pytorch_model-00001-of-00002.bin")
    torch.save({n: state[n] for n in names[half:]}, src / "pytorch_model-00002-of-00002.bin")
    weight_map = {n: f"pytorch_model-0000{1 if i < half else 2}-of-00002.bin" for i, n in enumerate(names)}
    (src / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    out = tmp_path / "out"
    result = cli("convert", str(src), str(out), "--to", "speculators", "--verifier", "org/target", "--allow-pickle")
    assert result.returncode == 0, result.stderr
    assert "left out (not the weights, not read): optimizer.pt, rng_state.pth, training_args.bin" in result.stdout


def test_only_trainer_pickles_is_no_weights(drafter):
    src = _trainer_folder(drafter)
    (src / "pytorch_model.bin").unlink()
    result = cli("validate", str(src), "--allow-pickle")
    assert result.returncode == 2 and "no weights found" in result.stderr
    assert "not read: optimizer.pt, rng_state.pth, training_args.bin" in result.stderr
    assert "Traceback" not in result.stderr
