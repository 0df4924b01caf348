"""Shared test fixtures.  Every test builds the tiny drafters it needs in a tmp dir.

Tests are isolated from the network and from the user's Hugging Face setup:
HF_HOME and friends point into tmp, HF_HUB_OFFLINE is set, tokens are unset.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _cuda_present() -> bool:
    import torch

    return torch.cuda.is_available()


# eagleconv.kernels' tests run the Triton kernels on CPU through Triton's interpreter, which must be
# switched on before the kernels are first used (triton.jit decides when it decorates). With a GPU they run on it.
if "TRITON_INTERPRET" not in os.environ and not _cuda_present():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402 (after TRITON_INTERPRET is set)

from eagleconv.synthetic import DrafterRecipe, make_drafter  # noqa: E402 (after TRITON_INTERPRET is set)


# The fast subset, ``python -m pytest -q -m "not slow"`` (docs/testing.md, "A first check"): the core paths in under
# 5 minutes on a 2-core machine (issue 35 item 5).  Each entry (a folder, a file, or a test name with or without its
# parameters) is left to the full suite, for the reason given; tests/test_fast_subset.py checks every entry exists.
SLOW_PATHS = {
    "tests/forward/": "forward passes of drafters and targets (FAST_KEEP keeps one)",
    "tests/simulation/": "decoding loops on the tiny pair (FAST_KEEP keeps one)",
    "tests/transforms/": "upgrade / downgrade fit and measure with forward passes",
    "tests/kernels/": "Triton kernels through Triton's interpreter",
    "tests/benchmarks/": "the benchmark scripts, end to end",
    "tests/interop/": "peer libraries in their own virtualenvs",
    "tests/fixtures/": "rebuilding the committed fixtures",
    "tests/measurement/": "measure against served drafters",
    "tests/fuzz/": "the parser fuzzer",
    "tests/docs/test_command_blocks.py::test_block_runs": "every doc block end to end",
    "tests/docs/test_example_output.py": "the docs' example output, regenerated",
    "tests/packaging/test_core_install.py": "an install into a fresh virtualenv",
    "tests/test_properties.py": "hypothesis searches",
    "tests/test_bounds_property.py": "hypothesis searches",
    "tests/engines/test_llamacpp.py": "real llama.cpp",
    "tests/engines/test_vllm_parity.py": "real vLLM",
    "tests/engines/test_llamacpp_gguf.py::test_validate_says_which_gguf_variants_real_llamacpp_runs": "real llama.cpp",
    "tests/engines/test_llamacpp_verdicts.py::test_the_five_classes_against_real_llamacpp": "real llama.cpp",
    "tests/engines/test_llamacpp_verdicts.py::test_llamacpps_converter_writes_what": "llama.cpp's own converter",
    "tests/formats/test_gguf_llamacpp_converter.py": "llama.cpp's own converter",
    "tests/formats/test_gguf_bpe_target.py": "llama.cpp's own converter",
    "tests/cli/test_omp_wait_policy.py": "child processes timed under load",
    "tests/cli/test_process_edges.py": "signal and crash edges in child processes",
    "tests/io/test_crash_safety.py": "writers killed in child processes",
    "tests/io/test_interrupted_writes.py": "writers interrupted in child processes",
    # test_bounds.py: its config-bomb tests stay (test_a_billion_layers_is_one_line, ...); these run simulate or
    # validate --forward (a torch import and a forward each) in a child process under an address-space limit
    "tests/test_bounds.py::test_target_": "simulate / validate --forward children on bad targets",
    "tests/test_bounds.py::test_mismatched_kv_heads": "validate / upgrade children with a forward",
    "tests/test_bounds.py::test_a_prompt_": "simulate children",
    "tests/test_bounds.py::test_generation_stops_at_max_model_len": "simulate children",
    "tests/test_bounds.py::test_prompts_": "simulate / validate --forward children",
    "tests/test_bounds.py::test_huge_decode_arguments": "simulate children",
    "tests/test_bounds.py::test_a_sparse_huge_": "memory bombs in children under an address-space limit",
    "tests/test_bounds.py::test_an_all_zero_calibration_is_one_line": "an upgrade child",
    "tests/test_bounds.py::test_max_tokens_1_report": "a simulate child",
    "tests/test_calibration.py::test_calibration_file_and_target_prompts": "calibration measured with forward passes",
    "tests/test_calibration.py::test_the_report_is_the_drafters_compared": "calibration measured with forward passes",
    "tests/test_calibration.py::test_downgrade_measures_on_the_calibration": "calibration measured with forward passes",
    "tests/validation/test_weight_dtypes.py::test_forward_": "validate --forward on odd dtypes",
    # upgrade / downgrade / simulate children outside their folders (measured idle: the subset took 5 min 20 s
    # with them, the goal is 5 min); the folders above hold the same paths
    "tests/cli/test_labels.py::test_upgrade_labels_the_unit_weight_comparison": "an upgrade child",
    "tests/cli/test_output.py::test_upgrade_shows_divergence_progress": "an upgrade child on a terminal",
    "tests/architectures/test_plugin_architecture.py::test_simulate_runs_the_plugins_norms": "simulate, a plugin",
    "tests/conversion/test_nonfinite_weights.py::test_upgrade_and_downgrade_refuse": "upgrade / downgrade children",
    "tests/engines/test_vllm_mla.py::test_upgrade_and_downgrade_to_vllm": "upgrade / downgrade with forwards",
}
# Inside the slow folders, the tests that keep a core path in the first check (a few seconds each).
FAST_KEEP = {
    "tests/forward/test_api.py::test_validate_forward_json": "validate --forward on a tiny drafter",
    "tests/simulation/test_simulate.py::test_cli_json_and_table": "simulate on the tiny pair",
}
_ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = f"{Path(item.path).resolve().relative_to(_ROOT).as_posix()}::{item.name}"
        if any(where.startswith(slow) for slow in SLOW_PATHS) and not any(where.startswith(k) for k in FAST_KEEP):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """Only loopback connections: nothing in eagleconv may reach a hub or any other host."""
    import ipaddress
    import socket

    real_connect = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else None
        if host is not None:
            try:
                loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise OSError(f"test tried to reach {host}: tests are offline")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture(autouse=True)
def _isolated_hf(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)


@pytest.fixture
def drafter(tmp_path):
    """Factory: ``drafter(producer="specforge", eagle31=True, ...)`` -> checkpoint dir."""
    counter = iter(range(10_000))

    def build(**kwargs) -> Path:
        return make_drafter(tmp_path / f"drafter{next(counter)}", DrafterRecipe(**kwargs))

    return build


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def edit_config(directory: Path, **changes) -> None:
    """Rewrite config.json with top-level keys changed (value None deletes the key)."""
    cfg = read_json(directory / "config.json")
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (directory / "config.json").write_text(json.dumps(cfg, indent=2))
