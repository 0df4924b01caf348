"""Fuzz harness for eagleconv's input parsers: safetensors headers, sharded-checkpoint indexes, configs.

Contract under test: given any bytes, a parser returns or raises an ``EagleconvError`` (one line, exit 1
or 2), and what it accepts loads downstream: an accepted header opens with safetensors' ``safe_open`` and
loads with ``load_file`` (same names, shapes and metadata); accepted JSON reads the same in transformers'
config reader; an accepted config lint finds no error in loads with ``AutoConfig`` when transformers knows
its model_type.  Any other exception, or a downstream refusal, is a bug and stops the fuzzer with the input.

    python tests/fuzz/fuzz_parsers.py -max_total_time=60 CORPUS_DIR     # atheris (libFuzzer), coverage-guided
    python tests/fuzz/fuzz_parsers.py --hypothesis --seconds 60          # no atheris: hypothesis, random bytes
    python tests/fuzz/fuzz_parsers.py --make-corpus CORPUS_DIR           # seed inputs (valid files of each kind)
    python tests/fuzz/fuzz_parsers.py CRASH_FILE                         # replay one input (atheris)

The first input byte picks the parser (0: header, 1: index, 2: config); the rest is the file.
``.ci/fuzz SECONDS`` runs it in CI.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

try:
    import atheris
except ImportError:  # the hypothesis fallback needs no atheris
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["eagleconv"]):
        from eagleconv.errors import EagleconvError
        from eagleconv.io.reader import _read_index
        from eagleconv.io.safetensors_header import read_header
        from eagleconv.support.jsonio import loads_strict
        from eagleconv.validation import lint
else:
    from eagleconv.errors import EagleconvError
    from eagleconv.io.reader import _read_index
    from eagleconv.io.safetensors_header import read_header
    from eagleconv.support.jsonio import loads_strict
    from eagleconv.validation import lint

WORK = Path(tempfile.mkdtemp(prefix="eagleconv-fuzz-"))
TARGETS = ("header", "index", "config")


def one_input(data: bytes) -> None:
    """Run one parser on ``data``; only EagleconvError may escape (it is the documented refusal)."""
    if not data:
        return
    target, body = TARGETS[data[0] % len(TARGETS)], data[1:]
    try:
        if target == "header":
            path = WORK / "model.safetensors"
            path.write_bytes(body)
            header = read_header(path)
            safetensors_loads(path, header)
        elif target == "index":
            (WORK / "model.safetensors.index.json").write_bytes(body)
            _read_index(WORK, "model.safetensors.index.json", ".safetensors")
        else:
            config = loads_strict(body, "config.json")
            transformers_reads(body, config)
            if isinstance(config, dict) and lint(config, engines="all").ok:
                autoconfig_loads(config)
    except EagleconvError:
        pass


def safetensors_loads(path: Path, header) -> None:
    """The pre-parser accepted it: the reference parser must open and load it, the same."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(header.entries), "safe_open sees other tensors"
        assert (f.metadata() or {}) == header.metadata, "safe_open sees other metadata"
    shapes = {name: tuple(t.shape) for name, t in load_file(str(path)).items()}
    assert shapes == {name: e.shape for name, e in header.entries.items()}, "load_file sees other shapes"


def transformers_reads(body: bytes, value: object) -> None:
    """Accepted JSON: transformers' config reader (UTF-8 text, json.loads, its float tags) reads the same value."""
    from transformers import PretrainedConfig

    path = WORK / "config.json"
    path.write_bytes(body)
    assert PretrainedConfig._dict_from_json_file(str(path)) == value, "transformers reads other JSON"


def autoconfig_loads(config: dict) -> None:
    """lint found no error: AutoConfig must load it when transformers knows the model_type."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING or "speculators_model_type" in config:
        return
    directory = WORK / "autoconfig"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    AutoConfig.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)


def make_corpus(directory: Path) -> None:
    """Valid inputs of each kind, from a seeded tiny drafter (nothing binary is committed)."""
    from eagleconv.conversion import convert
    from eagleconv.synthetic import DrafterRecipe, make_drafter

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for producer in ("vllm", "speculators", "specforge"):
            src = make_drafter(Path(tmp) / producer, DrafterRecipe(producer=producer, eagle31=producer != "vllm"))
            (directory / f"config-{producer}").write_bytes(b"\x02" + (src / "config.json").read_bytes())
        sharded = Path(tmp) / "sharded"
        convert(Path(tmp) / "vllm", sharded, "vllm", max_shard_size=4096, durable=False)
        (directory / "index").write_bytes(b"\x01" + (sharded / "model.safetensors.index.json").read_bytes())
        shard = sorted(sharded.glob("*.safetensors"))[0].read_bytes()
        header_end = 8 + int.from_bytes(shard[:8], "little")
        (directory / "header").write_bytes(b"\x00" + shard[:header_end + 64])


def hypothesis_fuzz(seconds: float) -> None:
    import time

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    deadline = time.monotonic() + seconds
    runs = 0

    # batches with a fresh seed each until the time is up; never an exception raised to stop (hypothesis would
    # replay it as a failure, and call it flaky when the same input ran clean before the deadline)
    @settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=4096))
    def run(data: bytes) -> None:
        nonlocal runs
        if time.monotonic() > deadline:
            return
        runs += 1
        one_input(data)

    while time.monotonic() < deadline:
        run()
    print(f"hypothesis fuzz: {runs} inputs in {seconds:.0f} s, no escape from the EagleconvError contract")


def _import_readers() -> None:
    """Import the downstream readers once, up front: torch and transformers take seconds, which the first
    accepted input would otherwise spend inside the fuzzing time (and be reported as a slow unit)."""
    import safetensors.torch  # noqa: F401
    from transformers import AutoConfig, PretrainedConfig  # noqa: F401
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: F401


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--make-corpus"]:
        make_corpus(Path(argv[2]))
        return 0
    _import_readers()
    if argv[1:2] == ["--hypothesis"] or atheris is None:
        seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 60.0
        hypothesis_fuzz(seconds)
        return 0
    atheris.Setup(argv, one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main(sys.argv))
