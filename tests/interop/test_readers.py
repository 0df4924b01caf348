"""Interop tier: load eagleconv's outputs with the readers their users use, and compare with DrafterSpec.

Each reader runs in its own virtualenv (built and cached by ``.ci/interop-env``)
through a small runner script that exchanges JSON with this process:

- speculators 0.9.0 (``runners/speculators_reader.py``): its config classes and
  a strict ``SpeculatorModel.from_pretrained`` (every file tensor loaded with
  equal values, nothing unexpected, no parameter left uninitialised);
- transformers newest 4.x and 5.x (``runners/hf_config_reader.py``):
  ``AutoConfig`` on every HF-style layout.

``.ci/interop`` runs this file with the virtualenvs' pythons in
``EAGLECONV_INTEROP_{SPECULATORS,TF4,TF5}`` and ``EAGLECONV_INTEROP_REQUIRED=1``;
without them (the main suite) every test here skips with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import eagleconv
from eagleconv.spec.drafter import DrafterSpec
from eagleconv.errors import ConversionError
from eagleconv.formats import LAYOUTS as REGISTERED, get_layout
from eagleconv.io.dtypes import CONFIG_DTYPE_NAMES
from eagleconv.synthetic import DrafterRecipe, make_drafter, make_target_config

RUNNERS = Path(__file__).with_name("runners")
READERS = {"speculators": "EAGLECONV_INTEROP_SPECULATORS", "tf4": "EAGLECONV_INTEROP_TF4", "tf5": "EAGLECONV_INTEROP_TF5"}
REQUIRED = os.environ.get("EAGLECONV_INTEROP_REQUIRED") == "1"
# every layout eagleconv writes as a Hugging Face directory; GGUF (a file llama.cpp reads, written against a target)
# is the llama.cpp tier's: .ci/llamacpp-parity and tests/formats/test_gguf_llamacpp_converter.py
LAYOUTS = tuple(sorted(name for name, layout in REGISTERED.items() if not layout.needs_target))

# Sources: EAGLE-3 and EAGLE-3.1 drafters, rope in transformers-5 spelling only (finding 3), a ModelOpt
# export without t2d under a compressed vocab (finding 2), speculators' own 3.1 default (norm_before_fc).
SOURCES: dict[str, tuple[DrafterRecipe, bool]] = {  # name -> (recipe, rewrite rope as rope_parameters only)
    "specforge-eagle3": (DrafterRecipe(producer="specforge", seed=11), True),
    "torchspec-eagle31": (DrafterRecipe(producer="torchspec", eagle31=True, seed=12), False),
    "modelopt-eagle3": (DrafterRecipe(producer="modelopt", seed=13), False),
    "speculators-norm-before-fc": (DrafterRecipe(producer="speculators", norm_before_fc=True, seed=14), True),
    "vllm-qwen3-eagle31": (DrafterRecipe(producer="vllm", architecture="qwen3", eagle31=True, seed=15), False),
}


def _python(reader: str) -> str:
    value = os.environ.get(READERS[reader])
    if value and Path(value).exists():
        return value
    reason = f"{reader} virtualenv not given ({READERS[reader]}); run .ci/interop"
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def _rope_parameters_only(path: Path) -> None:
    cfg = json.loads((path / "config.json").read_text())
    decoder = cfg.get("transformer_layer_config", cfg)
    theta = decoder.pop("rope_theta")
    decoder["rope_parameters"] = {"rope_type": "llama3", "rope_theta": theta, "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}
    (path / "config.json").write_text(json.dumps(cfg))


def _verifier(directory: Path) -> Path:
    """A tiny target model speculators can load its verifier-owned weights from (config + 3 tensors)."""
    import torch
    from safetensors.torch import save_file

    make_target_config(directory)
    g = torch.Generator().manual_seed(99)
    save_file({"model.embed_tokens.weight": torch.randn(128, 32, generator=g).bfloat16(),
               "lm_head.weight": torch.randn(128, 32, generator=g).bfloat16(),
               "model.norm.weight": (1 + 0.1 * torch.randn(32, generator=g)).bfloat16()},
              str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


class Outputs:
    """Every (source, layout) conversion eagleconv performs, plus the known-bad speculators variants."""

    def __init__(self, root: Path):
        self.verifier = _verifier(root / "verifier")
        self.dirs: dict[str, Path] = {}
        self.layout: dict[str, str] = {}
        self.refused: dict[str, str] = {}
        for name, (recipe, rope_parameters) in SOURCES.items():
            src = make_drafter(root / "src" / name, recipe)
            if rope_parameters:
                _rope_parameters_only(src)
            src_spec = eagleconv.inspect(src, allow_pickle=True).spec
            assert src_spec is not None
            for layout in LAYOUTS:
                case = f"{name}->{layout}"
                out = root / "out" / case.replace(">", "")
                own_embed = src_spec.embed_tokens == "drafter"
                drop = ["embed_tokens"] if own_embed and layout in ("specforge", "modelopt", "eagle") else []
                try:
                    eagleconv.convert(src, out, layout, drop=drop, verifier=str(self.verifier),
                                      allow_pickle=True, durable=False)
                except ConversionError as exc:  # the layout cannot carry this drafter (EAGLE-3.1 into modelopt...)
                    self.refused[case] = exc.one_line()
                    continue
                self.dirs[case], self.layout[case] = out, layout
        # What speculators must refuse, and validate --engine speculators must call an error.
        src = root / "src" / "modelopt-eagle3"
        self.bad = {"no-verifier": root / "bad" / "no-verifier", "no-t2d": root / "bad" / "no-t2d"}
        eagleconv.convert(src, self.bad["no-verifier"], "speculators", durable=False)
        eagleconv.convert(src, self.bad["no-t2d"], "speculators", verifier=str(self.verifier), durable=False)
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(self.bad["no-t2d"] / "model.safetensors"))
        del tensors["t2d"]
        save_file(tensors, str(self.bad["no-t2d"] / "model.safetensors"), metadata={"format": "pt"})

    def spec(self, case: str) -> DrafterSpec:
        spec = eagleconv.inspect(self.dirs[case], allow_pickle=True).spec
        assert spec is not None
        return spec

    def cases(self, *, speculators: bool) -> dict[str, str]:
        return {c: str(p) for c, p in self.dirs.items() if (self.layout[c] == "speculators") == speculators}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Outputs:
    if not REQUIRED and not any(os.environ.get(v) for v in READERS.values()):
        pytest.skip("no interop virtualenv given (EAGLECONV_INTEROP_*); run .ci/interop")
    return Outputs(tmp_path_factory.mktemp("interop"))


def _run(python: str, runner: str, cases: dict[str, str]) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    proc = subprocess.run([python, str(RUNNERS / runner)], input=json.dumps({"cases": cases}), text=True,
                          capture_output=True, env=env, timeout=600)
    assert proc.returncode == 0, f"{runner} failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


# -- comparisons ---------------------------------------------------------------------------------

def _expected_rope(spec: DrafterSpec) -> tuple[float, dict[str, Any]]:
    """The spec's typed rotary base and scaling, as a reader's rope_type + parameters."""
    r = spec.rope
    assert r.theta is not None
    params: dict[str, Any] = {"rope_type": "default" if r.scaling == "none" else r.scaling}
    params.update({k: v for k, v in r.model_dump(exclude={"theta", "scaling", "interleaved", "stated"}).items()
                   if v is not None})
    return r.theta, params


def _same_rope(kind_and_params: dict[str, Any] | None, expected: dict[str, Any]) -> bool:
    got = dict(kind_and_params or {})
    got.pop("rope_theta", None)
    got["rope_type"] = got.pop("rope_type", got.pop("type", "default"))
    want = dict(expected)
    return got == want


def _flag(attrs: dict[str, Any], *paths: str) -> bool:
    """The vLLM 0.32 read of a flag from the loaded config (first present path wins; absent: false)."""
    for path in paths:
        node: Any = attrs
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return bool(node)
    return False


def compare_hf(spec: DrafterSpec, layout: str, got: dict[str, Any], major: int) -> list[str]:
    """What transformers read differs from the spec: one line per field."""
    problems = []

    def same(field: str, read: Any, want: Any) -> None:
        if read != want:
            problems.append(f"{field}: read {read!r}, spec {want!r}")

    for field in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                  "vocab_size", "rms_norm_eps", "max_position_embeddings"):
        same(field, got[field], getattr(spec, field))
    attrs = got["attributes"]
    same("draft_vocab_size", attrs.get("draft_vocab_size"), spec.draft_vocab_size)
    if "target_hidden_size" in attrs:
        same("target_hidden_size", attrs["target_hidden_size"], spec.target_hidden_size)
    if "num_aux_hidden_states" in attrs:
        same("num_aux_hidden_states", attrs["num_aux_hidden_states"], spec.aux.count)
    same("dtype", got["dtype"], CONFIG_DTYPE_NAMES[spec.dtype or ""])
    theta, params = _expected_rope(spec)
    if major == 4:  # rope_theta + rope_scaling
        same("rope_theta", got["rope_theta"], theta)
        if not _same_rope(got["rope_scaling"] or {"rope_type": "default"}, params):
            problems.append(f"rope_scaling: read {got['rope_scaling']!r}, spec {params!r}")
    else:  # rope_parameters
        same("rope_parameters.rope_theta", (got["rope_parameters"] or {}).get("rope_theta"), theta)
        if not _same_rope(got["rope_parameters"], params):
            problems.append(f"rope_parameters: read {got['rope_parameters']!r}, spec {params!r}")
    flags = {
        "fc_norm": _flag(attrs, "fc_norm"),
        "norm_before_fc": _flag(attrs, "eagle_config.norm_before_fc", "norm_before_fc"),
        "norm_output": _flag(attrs, "norm_output", "eagle_config.return_hidden_post_norm"),
        "norm_before_residual": _flag(attrs, "norm_before_residual"),
    }
    for flag, value in flags.items():
        same(flag, value, getattr(spec.flags, flag))
    ids = attrs.get("eagle_aux_hidden_state_layer_ids") or (attrs.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    want = spec.aux.ids_as(get_layout(layout).aux_convention_for(spec.architecture))
    same("aux layer ids", tuple(ids) if ids else None, want)
    return problems


def compare_speculators(spec: DrafterSpec, got: dict[str, Any]) -> list[str]:
    problems = []
    config, load = got["config"], got["load"]
    if "error" in config:
        return [f"config classes: {config['error']}"]

    def same(field: str, read: Any, want: Any) -> None:
        if read != want:
            problems.append(f"{field}: read {read!r}, spec {want!r}")

    for field in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                  "vocab_size", "draft_vocab_size", "target_hidden_size", "rms_norm_eps"):
        same(field, config[field], getattr(spec, field))
    same("dtype", config["dtype"], CONFIG_DTYPE_NAMES[spec.dtype or ""])
    theta, params = _expected_rope(spec)
    same("rope theta", (config["rope_parameters"] or {}).get("rope_theta"), theta)
    if not _same_rope(config["rope_parameters"], params):
        problems.append(f"rope_parameters: read {config['rope_parameters']!r}, spec {params!r}")
    for flag, value in config["flags"].items():
        same(flag, value, getattr(spec.flags, flag))
    same("aux layer ids", tuple(config["aux_layer_ids"] or ()) or None, spec.aux.ids_as("hidden_state_index"))
    assert spec.verifier is not None
    same("verifier", config["verifier"], {"name_or_path": spec.verifier.name_or_path,
                                          "architectures": list(spec.verifier.architectures)})
    if "error" in load:
        return problems + [f"SpeculatorModel.from_pretrained: {load['error']}"]
    same("unexpected file tensors", load["unexpected"], [])
    same("file tensors loaded with other values", load["differs"], [])
    same("uninitialised (NaN) parameters", load["nan"], [])
    same("parameters neither from the file nor the verifier", load["not_from_file"],
         ["embed_tokens.weight"] if load["embed_from_verifier"] else [])
    same("fc_norm modules", load["fc_norm_modules"], spec.aux.count if spec.flags.fc_norm else 0)
    same("input_norm module", load["input_norm"], spec.flags.norm_before_fc)
    return problems


# -- the tier --------------------------------------------------------------------------------------

def test_every_layout_is_written_for_eagle3_and_eagle31_sources(outputs):
    written = {c.split("->")[1] for c in outputs.dirs}
    assert written == set(LAYOUTS), outputs.refused
    for case, why in outputs.refused.items():  # only what the layout cannot carry is refused
        assert case.split("->")[0] != "specforge-eagle3" and ("cannot" in why or "has no" in why), (case, why)
    for name in SOURCES:  # each source reaches vllm and speculators, the two layouts that hold every flag
        assert f"{name}->vllm" in outputs.dirs and f"{name}->speculators" in outputs.dirs


@pytest.mark.parametrize("reader, major", [("tf4", 4), ("tf5", 5)])
def test_transformers_autoconfig_reads_every_hf_layout_as_the_spec(outputs, reader, major):
    answer = _run(_python(reader), "hf_config_reader.py", outputs.cases(speculators=False))
    assert answer["version"].startswith(f"{major}."), answer["version"]
    failures = {}
    for case, got in answer["results"].items():
        problems = [got["error"]] if "error" in got else compare_hf(outputs.spec(case), outputs.layout[case], got, major)
        if problems:
            failures[case] = problems
    assert not failures, f"transformers {answer['version']}: " + json.dumps(failures, indent=1)


def test_speculators_loads_every_speculators_output_strictly(outputs):
    cases = {**outputs.cases(speculators=True), **{f"bad:{k}": str(v) for k, v in outputs.bad.items()}}
    answer = _run(_python("speculators"), "speculators_reader.py", cases)
    assert answer["versions"]["speculators"] == "0.9.0" and answer["versions"]["torch"].startswith("2.13.0")
    results = answer["results"]
    failures = {}
    for case in outputs.cases(speculators=True):
        problems = compare_speculators(outputs.spec(case), results[case])
        if problems:
            failures[case] = problems
    assert not failures, json.dumps(failures, indent=1)
    # The speculators consumer profile agrees with speculators itself: clean where it loads, an error where not.
    for case, path in cases.items():
        loads = "error" not in results[case]["load"]
        errors = [f.code for f in eagleconv.validate(path, engines=("speculators",), numeric=False).findings
                  if f.severity == "error"]
        assert loads == (not errors), (case, results[case]["load"], errors)
    assert all("error" in results[f"bad:{k}"]["load"] for k in outputs.bad), {k: results[f"bad:{k}"] for k in outputs.bad}
