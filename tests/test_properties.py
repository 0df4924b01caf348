"""Property tests (hypothesis): random tiny drafters round-trip bit-exactly through every layout, validate
only ever reports, and the header/index/config parsers only ever raise eagleconv's input error.

The parsers' promise is one way and asserted by construction: every header the pre-parser accepts opens
with safetensors' ``safe_open`` and loads with ``load_file``; every JSON text it accepts reads the same in
transformers' config reader; and every drafter config validate accepts (no error finding) loads with
transformers' ``AutoConfig`` when transformers knows its model_type.

Profiles: ``ci`` (default; 200 examples per property, derandomized so CI is reproducible; about 30 s for
the file on two cores) ``dev`` (25 random examples, a quick look) and ``soak`` (2000 random examples, minutes).  Choose with
``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from eagleconv.architectures import ARCHITECTURES
from eagleconv.conversion import convert
from eagleconv.errors import ConversionError, EagleconvError, UnsafeInputError
from eagleconv.formats import LAYOUTS
from eagleconv.io.reader import open_checkpoint
from eagleconv.io.safetensors_header import read_header
from eagleconv.support.jsonio import loads_strict
from eagleconv.synthetic import PRODUCERS, DrafterRecipe, TinyDims, make_drafter
from eagleconv.validation import lint, validate

settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("dev", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("soak", max_examples=2000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# -- random tiny drafters ---------------------------------------------------------------

@st.composite
def recipes(draw) -> DrafterRecipe:
    """A drafter its producer can actually write: flags, aux count and layers within what the layout holds."""
    producer = draw(st.sampled_from(PRODUCERS))
    layout = LAYOUTS[producer]
    architecture = draw(st.sampled_from(sorted(layout.architectures)))
    eagle31 = {"fc_norm", "norm_output"} <= layout.flags and draw(st.booleans())
    norm_before_fc = not eagle31 and producer in ("vllm", "speculators", "modelopt") and architecture == "llama" \
        and draw(st.booleans())  # EC020: norm_before_fc and fc_norm exclude each other
    k = layout.fixed_aux_count or draw(st.integers(1, 4))
    target_layers = draw(st.integers(k + 2, 40))
    ids = tuple(sorted(draw(st.sets(st.integers(1, target_layers - 1), min_size=k, max_size=k))))
    heads_kv = draw(st.sampled_from([(2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (6, 3)]))
    head_dim = draw(st.sampled_from([4, 8, 12]))
    # transformers 5's LlamaConfig refuses heads that do not divide hidden_size (EC005): not a drafter to write
    divides = bool(ARCHITECTURES[architecture].transformers_heads_divide_hidden)
    hidden = draw(st.sampled_from([h for h in (8, 16, 24, 32) if not divides or h % heads_kv[0] == 0]))
    vocab = draw(st.integers(8, 160))
    draft_vocab = draw(st.integers(1, vocab))
    wide = producer in ("torchspec", "speculators", "automodel") and draw(st.booleans())
    dims = TinyDims(hidden=hidden, target_hidden=hidden + (8 if wide else 0), heads=heads_kv[0],
                    kv_heads=heads_kv[1], head_dim=head_dim, intermediate=draw(st.sampled_from([8, 16, 40])),
                    vocab=vocab, draft_vocab=draft_vocab, aux_ids=ids, target_layers=target_layers,
                    q_lora_rank=draw(st.sampled_from([8, 12])), kv_lora_rank=draw(st.sampled_from([8, 16])),
                    qk_nope_head_dim=draw(st.sampled_from([4, 8])), qk_rope_head_dim=draw(st.sampled_from([2, 4])),
                    v_head_dim=draw(st.sampled_from([4, 12])))
    layers = 1 if layout.max_layers == 1 else draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**16))
    # synthetic picks the draft vocab at random; the rare pick of exactly the first ids gives an all-zero d2t,
    # which validation rightly flags (EC030) as almost never trained: not a drafter to round-trip
    import numpy as np

    used = np.sort(np.random.default_rng(seed).choice(vocab, size=draft_vocab, replace=False))
    assume(draft_vocab == vocab or int(used[-1]) != draft_vocab - 1)
    return DrafterRecipe(producer=producer, architecture=architecture, eagle31=eagle31, norm_before_fc=norm_before_fc,
                         embed_tokens=True if wide else None, layers=layers, dims=dims,
                         dtype=draw(st.sampled_from(["bfloat16", "float16", "float32"])), seed=seed)


def _rederived(path: Path, name: str) -> str | None:
    """sha256 of ``name`` derived exactly from what ``path`` holds (t2d from d2t), as convert would."""
    from eagleconv.conversion.plan import _derive
    from eagleconv.readers.loading import load_drafter

    loaded = load_drafter(path)
    try:
        derived = _derive(name, loaded, loaded.read.spec)
    finally:
        loaded.close()
    return hashlib.sha256(derived[0]).hexdigest() if derived is not None else None


def digests(path: Path) -> dict[str, str]:
    with open_checkpoint(path, allow_pickle=True) as store:
        return {name: hashlib.sha256(store.read_raw(name).tobytes()).hexdigest() for name in store.tensors}


# tmpfs when there is one: the examples write thousands of tiny checkpoints, and disk I/O, not CPU, bounds them
SCRATCH_ROOT = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class Scratch:
    """A fresh directory per example (hypothesis runs many examples inside one test call)."""

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix="eagleconv-prop-", dir=SCRATCH_ROOT))
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


@given(recipe=recipes(), to=st.sampled_from(sorted(n for n, layout in LAYOUTS.items() if not layout.needs_target)), shard=st.sampled_from([None, 1, 700, 4096]))
def test_a_to_b_to_a_is_bit_exact(recipe, to, shard):
    with Scratch() as tmp:
        src = make_drafter(tmp / "src", recipe)
        a, b, back = tmp / "a", tmp / "b", tmp / "back"
        # A is eagleconv's own writing of the producer's layout (SafeAILab's pickle becomes safetensors).
        convert(src, a, recipe.producer, allow_pickle=True, durable=False)
        try:
            there = convert(a, b, to, max_shard_size=shard, durable=False)
        except ConversionError as exc:  # the layout cannot hold this drafter exactly: refused, nothing written
            assert not b.exists(), exc
            event(f"refused {recipe.producer} -> {to}")
            return
        event(f"converted {recipe.producer} -> {to}")
        convert(b, back, recipe.producer, max_shard_size=shard, durable=False)
        got, want = digests(back), digests(a)
        assert set(got) <= set(want)
        for name in set(want) - set(got):  # B dropped it as exactly derivable: it must still be derivable, exactly
            assert any(re.fullmatch(c.pattern, name) and c.policy == "derive" for c in LAYOUTS[to].cannot_hold), name
            assert _rederived(back, name) == want[name], name
        assert {n: got[n] for n in got} == {n: want[n] for n in got}
        assert json.loads((back / "config.json").read_text()).get("eagleconv", {}).get("layout") == recipe.producer
        from eagleconv import inspect

        before, after = inspect(a).spec, inspect(back).spec
        lost = set()
        if before.model_type != after.model_type:  # a layout may rename it for its consumer: reported, never silent
            assert any(c.startswith(f"model_type {before.model_type} -> ") for c in there.config_changes), there
            lost.add("model_type")
        if before.verifier and before.verifier.name_or_path and not LAYOUTS[to].carries_verifier:
            lost.add("verifier")  # only speculators records it; the drop is reported, never silent
            assert any("dropped verifier" in c for c in there.config_changes), there.config_changes
        assert after.model_dump(exclude={"extra", *lost}) == before.model_dump(exclude={"extra", *lost})


# -- validate only reports ------------------------------------------------------------

JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                           | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, prefix + (key,))
    return out


@st.composite
def mutated_configs(draw, config: dict) -> dict:
    config = json.loads(json.dumps(config))
    for _ in range(draw(st.integers(0, 4))):
        paths = _paths(config)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = config
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.booleans()):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return config


@given(recipe=recipes(), data=st.data(), drop=st.integers(0, 3))
def test_validate_never_raises_it_reports(recipe, data, drop):
    with Scratch() as tmp:
        src = make_drafter(tmp / "src", recipe)
        config = json.loads((src / "config.json").read_text())
        clean = validate(src, engines="all", allow_pickle=True)
        assert clean.findings is not None
        mutated = data.draw(mutated_configs(config))
        (src / "config.json").write_text(json.dumps(mutated))
        if drop and recipe.producer != "eagle":
            from safetensors.numpy import load_file, save_file  # noqa: F401  (only the header is edited)

            _drop_tensors(src / "model.safetensors", data.draw(st.integers(0, 2**16)), drop)
        try:
            report = validate(src, engines="all", allow_pickle=True)
        except EagleconvError as exc:
            # only input that cannot be read at all is refused, and with an input-error exit code
            assert exc.exit_code in (1, 2), exc
            event(f"refused: {type(exc).__name__}")
            return
        assert report.ok == (not any(f.severity == "error" for f in report.findings))
        linted = lint(src / "config.json", engines="all")
        assert linted.ok == (not any(f.severity == "error" for f in linted.findings))
        if report.ok:  # accepted: then transformers must load it too (when it knows the model type at all)
            event("accepted")
            assert_autoconfig_loads(src)


def assert_autoconfig_loads(directory: Path) -> None:
    """What engines built on transformers do first: AutoConfig.from_pretrained on the drafter directory."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = json.loads((directory / "config.json").read_text()).get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        event("AutoConfig skipped: model_type unknown to transformers")  # speculators, kimi_k2: not read by it
        return
    try:
        AutoConfig.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    except Exception as exc:
        raise AssertionError(f"validate accepted a config AutoConfig refuses: {type(exc).__name__}: {exc}") from exc


AUTOCONFIG_FIELDS = ["torch_dtype", "dtype", "head_dim", "hidden_act", "rope_scaling", "rope_parameters", "rope_theta",
                     "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings", "bos_token_id",
                     "eos_token_id", "pad_token_id", "attention_bias", "mlp_bias", "rms_norm_eps", "hidden_size",
                     "num_attention_heads", "layer_types", "initializer_range", "use_cache", "attention_dropout",
                     "pretraining_tp", "sliding_window", "use_sliding_window", "max_window_layers", "id2label",
                     "intermediate_size", "vocab_size", "num_hidden_layers", "_name_or_path", "transformers_version"]
PLAUSIBLE = st.sampled_from([None, True, False, 0, 1, 2, 3, 7, 8, 16, 64, -1, 1.0, 1.5, 1e-6, 10000, 10000.0, "",
                             "bfloat16", "float16", "float8", "auto", "BF16", "torch.float16", "int8", "float8_e4m3fn",
                             "silu", "gelu", "foo", "full_attention", ["full_attention"], ["x"], [1, 2], [], {},
                             {"rope_type": "default", "rope_theta": 10000.0}, {"rope_type": "linear", "factor": 2.0},
                             {"rope_type": "linear"}, {"rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 1024},
                             {"rope_type": "foo"}, {"type": "dynamic", "factor": 2.0}, {"0": "a"}])


@given(recipe=recipes(), changes=st.dictionaries(st.sampled_from(AUTOCONFIG_FIELDS), PLAUSIBLE | JSON_VALUES,
                                                 min_size=1, max_size=3))
def test_configs_validate_accepts_load_with_autoconfig(recipe, changes):
    """Plausible edits of the fields transformers' config classes check: accepted means AutoConfig loads it."""
    with Scratch() as tmp:
        src = make_drafter(tmp / "src", recipe)
        config = json.loads((src / "config.json").read_text())
        config.update(changes)
        (src / "config.json").write_text(json.dumps(config))
        try:
            report = validate(src, engines="all", numeric=False, allow_pickle=True)
        except EagleconvError as exc:
            assert exc.exit_code in (1, 2), exc
            event("refused")
            return
        if not report.ok:
            event("reported")
            return
        event("accepted")
        assert_autoconfig_loads(src)


def _drop_tensors(path: Path, seed: int, count: int) -> None:
    """Rewrite a safetensors file without ``count`` of its tensors (bytes of the others unchanged)."""
    import random

    header = read_header(path)
    names = sorted(header.entries)
    gone = set(random.Random(seed).sample(names, min(count, len(names) - 1)))
    blob = path.read_bytes()
    meta, parts, offset = {}, [], 0
    for name in names:
        if name in gone:
            continue
        e = header.entries[name]
        data = blob[e.start:e.end]  # absolute file offsets
        meta[name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + len(data)]}
        parts.append(data)
        offset += len(data)
    text = json.dumps(meta).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(parts))


# -- parsers given random or mutated bytes ------------------------------------------------

def _valid_safetensors() -> bytes:
    with Scratch() as tmp:
        src = make_drafter(tmp / "d", DrafterRecipe(producer="vllm", eagle31=True))
        return (src / "model.safetensors").read_bytes()


VALID_ST = _valid_safetensors()
HEADER_END = 8 + struct.unpack("<Q", VALID_ST[:8])[0]


@st.composite
def mutated_bytes(draw, seed: bytes, region: int) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        i = draw(st.integers(0, max(0, min(region, len(data)) - 1)))
        if kind == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[i] = draw(st.integers(0, 255))
        elif kind == "cut":
            data = data[:i]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[i:i + draw(st.integers(1, 16))]
    return bytes(data)


def _header_only_raises_input_error(data: bytes) -> None:
    with Scratch() as tmp:
        path = tmp / "model.safetensors"
        path.write_bytes(data)
        try:
            header = read_header(path)
        except UnsafeInputError:
            event("refused")
            return
        event("accepted")
        assert_safetensors_loads(path, header)


def assert_safetensors_loads(path: Path, header) -> None:
    """What the pre-parser accepts, the reference parser opens and loads, with the same names and shapes."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(header.entries)
        assert (f.metadata() or {}) == header.metadata
    loaded = load_file(str(path))
    assert {n: tuple(t.shape) for n, t in loaded.items()} == {n: e.shape for n, e in header.entries.items()}


@given(data=st.binary(max_size=256) | st.builds(lambda n, rest: struct.pack("<Q", n) + rest,
                                                   st.integers(0, 2**64 - 1), st.binary(max_size=64)))
def test_header_parser_on_random_bytes(data):
    _header_only_raises_input_error(data)


@given(data=mutated_bytes(VALID_ST, HEADER_END))
def test_header_parser_on_mutated_headers(data):
    _header_only_raises_input_error(data)


HEADER_DTYPES = ["BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32",
                 "F32", "I64", "U64", "F64"]
DIMS = st.integers(0, 3) | st.sampled_from([0, 2**31, 2**32, 2**61, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70])


@st.composite
def structured_headers(draw) -> bytes:
    """Headers that are valid JSON with plausible structure, so the field checks, not the JSON syntax, are hit.

    The sizes are mostly made consistent with the shapes (so a file can be accepted), and then some field is
    given a value of any JSON type: a metadata that is a list, a dtype that is a map, a dimension past a u64.
    """
    header: dict[str, object] = {}
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.none() | st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)
                                      | JSON_VALUES)
    position, data = 0, b""
    for i in range(draw(st.integers(0, 3))):
        dtype = draw(st.sampled_from(HEADER_DTYPES))
        shape = draw(st.lists(DIMS, max_size=3))
        from eagleconv.io.dtypes import DTYPE_SIZES

        count = 1
        for d in shape:
            count *= d
        size = count * DTYPE_SIZES[dtype] if count * DTYPE_SIZES[dtype] <= 64 else draw(st.integers(0, 64))
        info: dict[str, object] = {"dtype": dtype, "shape": shape, "data_offsets": [position, position + size]}
        if draw(st.integers(0, 4)) == 0:  # one field gets any JSON value
            info[draw(st.sampled_from(["dtype", "shape", "data_offsets", "extra"]))] = draw(JSON_VALUES)
        header[draw(st.sampled_from([f"t{i}", "", "__metadata__", "\ud800", f"t{i}.weight"]))] = info
        position += size
        data += bytes(size)
    text = json.dumps(header)  # ensure_ascii: the lone surrogate name is written as the escape \\ud800
    if draw(st.integers(0, 9)) == 0:  # a -0, where serde_json reads a float
        text = text.replace(": [0, ", ": [-0, ", 1)
    raw = text.encode()
    raw = draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + raw + b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data + bytes(draw(st.sampled_from([0, 0, 0, 1])))


@given(data=structured_headers())
def test_header_parser_on_structured_headers(data):
    _header_only_raises_input_error(data)


def _json_only_raises_input_error(data: bytes) -> None:
    try:
        value = loads_strict(data, "config.json")
    except UnsafeInputError:
        event("refused")
        return
    event("accepted")
    assert_transformers_reads_json(data, value)


def assert_transformers_reads_json(data: bytes, value: object) -> None:
    """Accepted JSON reads the same in transformers' config reader, and a config holding it loads."""
    from transformers import AutoConfig, PretrainedConfig

    with Scratch() as tmp:
        path = tmp / "config.json"
        path.write_bytes(data)
        assert PretrainedConfig._dict_from_json_file(str(path)) == value
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")  # no surrogate, no inf
        path.write_text(json.dumps({"model_type": "llama", "eagleconv_payload": value}))
        assert AutoConfig.from_pretrained(str(tmp), local_files_only=True).eagleconv_payload == value


JSON_EDGES = st.sampled_from([b'"\\ud800"', b'"\\udc00x"', b'"\\ud83d\\ude00"', b"1e999", b"-1e400", b"1e308",
                              b"-0", b"[" * 65 + b"]" * 65, b"[" * 64 + b"]" * 64, b"\xef\xbb\xbf{}",
                              '{"a": 1}'.encode("utf-16"), b'{"a": "\xed\xa0\x80"}', b'{"__float__": "NaN"}',
                              b'{"__float__": "nan"}', b'{"__float__": 1}'])


VALID_CONFIG = json.dumps(json.loads(json.dumps({"a": [1, 2.5, None], "hidden_size": 32, "eagle_config": {"x": True}}))).encode()


@given(data=st.binary(max_size=200) | mutated_bytes(VALID_CONFIG, len(VALID_CONFIG))
       | st.builds(lambda value, edge: json.dumps({"a": value}).encode()[:-1] + b', "e": ' + edge + b"}",
                   JSON_VALUES, JSON_EDGES) | JSON_EDGES)
def test_json_parser_only_raises_input_error(data):
    _json_only_raises_input_error(data)


INDEX_DIR: dict[str, Path] = {}


def _sharded_checkpoint() -> Path:
    if "dir" not in INDEX_DIR:
        tmp = Path(tempfile.mkdtemp(prefix="eagleconv-prop-index-", dir=SCRATCH_ROOT))
        src = make_drafter(tmp / "src", DrafterRecipe(producer="vllm"))
        convert(src, tmp / "sharded", "vllm", max_shard_size=2048, durable=False)
        INDEX_DIR["dir"] = tmp / "sharded"
        atexit.register(shutil.rmtree, tmp, True)
    return INDEX_DIR["dir"]


@given(data=st.data())
def test_index_parser_only_raises_input_error(data):
    base = _sharded_checkpoint()
    index = (base / "model.safetensors.index.json").read_bytes()
    mutated = data.draw(mutated_bytes(index, len(index)) | st.binary(max_size=120))
    with Scratch() as tmp:
        d = tmp / "ckpt"
        shutil.copytree(base, d)
        (d / "model.safetensors.index.json").write_bytes(mutated)
        try:
            with open_checkpoint(d) as store:
                assert store.tensors
            event("accepted")
        except EagleconvError as exc:
            assert isinstance(exc, UnsafeInputError | ConversionError) or exc.exit_code in (1, 2)
            event(f"refused: {type(exc).__name__}")


@given(config=st.dictionaries(st.sampled_from(["hidden_size", "num_attention_heads", "architectures", "model_type",
                                               "draft_vocab_size", "eagle_config", "speculators_model_type",
                                               "transformer_layer_config", "eagle_aux_hidden_state_layer_ids",
                                               "fc_norm", "norm_before_fc", "vocab_size", "num_aux_hidden_states",
                                               "target_hidden_size", "eagleconv"]), JSON_VALUES, max_size=10))
@example(config={"eagle_aux_hidden_state_layer_ids": [[]]})  # found by this property: unhashable ids crashed EC011
def test_lint_of_random_configs_only_reports(config):
    try:
        report = lint(config, engines="all")
    except EagleconvError as exc:
        assert exc.exit_code in (1, 2)
        event(f"refused: {type(exc).__name__}")
        return
    assert report.ok == (not any(f.severity == "error" for f in report.findings))


pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
