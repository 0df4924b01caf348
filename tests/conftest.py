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


# The fast subset, ``python -m pytest -q -m "not slow"`` (docs/testing.md, "A first check"): the core paths
# (reading every layout, conversion, validation and the engines' rules, the CLI's contract, the Hub gate, the
# hostile inputs).  What runs forward passes, real engines or servers, whole doc pages end to end, installs, signal
# and crash edges in child processes, or property searches carries the ``slow`` marker (issue 35 item 3).
SLOW_PATHS = (
    "tests/forward/", "tests/simulate/", "tests/transforms/", "tests/kernels/", "tests/benchmarks/",
    "tests/interop/", "tests/fixtures/", "tests/measure/", "tests/fuzz/",
    "tests/docs/test_command_blocks.py::test_block_runs", "tests/docs/test_example_output.py",
    "tests/packaging/test_core_install.py", "tests/test_properties.py", "tests/test_bounds_property.py",
    "tests/engines/test_llamacpp.py", "tests/engines/test_vllm_parity.py", "tests/cli/test_omp_wait_policy.py",
    "tests/cli/test_process_edges.py", "tests/io/test_crash_safety.py", "tests/io/test_interrupted_writes.py",
)
_ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = f"{Path(item.path).resolve().relative_to(_ROOT).as_posix()}::{item.name}"
        if any(where.startswith(slow) for slow in SLOW_PATHS):
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
