"""Defect 11: torch is a lower bound (weights_only-safe loading needs >= 2.10), hub's size parser is used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.version import Version

from eagleconv.cli.main import cli
from eagleconv.errors import UnsafeInputError

REPO = Path(__file__).resolve().parents[2]


def requirements() -> dict[str, Requirement]:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = [*project["dependencies"], *project["optional-dependencies"]["forward"]]  # torch: the forward extra
    return {Requirement(r).name.lower(): Requirement(r) for r in texts}


def test_torch_is_a_lower_bound_not_a_pin():
    torch = requirements()["torch"]
    assert all(s.operator == ">=" for s in torch.specifier), torch  # installing eagleconv never replaces torch
    assert not torch.specifier.contains("2.9.1") and torch.specifier.contains("2.10.0")
    assert torch.specifier.contains("9.0")  # a later torch is fine


def test_readme_commands_still_pin_the_cpu_build_first():
    """The Tests command installs the CPU torch first; the Quickstart's core install needs no torch (issue 17)."""
    readme = (REPO / "README.md").read_text()

    def body(section: str) -> str:
        return readme.split(section, 1)[1].split("\n## ", 1)[0]

    # one CPU path for Install and Tests: the +cpu build (never PyPI's CUDA wheel), and .ci/run runs the Tests line
    cpu = 'pip install "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu'
    assert f"{cpu} &&" in body("## Tests") and f"{cpu}\n" in body("## Install")
    tests_line = next(ln for ln in body("## Tests").splitlines() if ln.startswith(cpu))
    assert tests_line in (REPO / ".ci" / "run").read_text().splitlines()
    quickstart = body("## Quickstart").split("```bash\n", 1)[1].split("```", 1)[0]
    assert quickstart.startswith("pip install . &&") and "torch" not in quickstart
    torch = requirements()["torch"]
    assert torch.specifier.contains("2.13.0")  # the pinned CPU build satisfies the requirement


def test_pickle_loading_refuses_torch_before_2_10(tmp_path, monkeypatch):
    import torch

    from eagleconv.io.pickle_reader import load_pickle_state_dict

    path = tmp_path / "pytorch_model.bin"
    torch.save({"fc.weight": torch.zeros(2)}, path)
    assert set(load_pickle_state_dict(path)) == {"fc.weight"}
    monkeypatch.setattr(torch, "__version__", "2.9.1+cpu")
    with pytest.raises(UnsafeInputError, match="2.10"):
        load_pickle_state_dict(path)


def test_sizes_mean_what_huggingface_hub_means():
    """--max-shard-size means what hub's max_shard_size means, read by our own parser (no private hub import)."""
    from huggingface_hub.serialization._base import parse_size_to_int

    from eagleconv.cli.main import parse_size

    for text in ("2GB", "500MB", "1.5GB", "64KB", " 3 MB"):
        assert parse_size(text) == parse_size_to_int(text), text
    sources = [p.read_text() for p in (REPO / "eagleconv").rglob("*.py")]
    assert not any("huggingface_hub.serialization._base" in s for s in sources)
    assert Version(requirements()["huggingface-hub"].specifier.__iter__().__next__().version) >= Version("0.23")


def test_bad_size_is_a_usage_error(drafter, tmp_path):
    result = CliRunner().invoke(cli, ["convert", str(drafter()), str(tmp_path / "o"), "--to", "vllm",
                                      "--max-shard-size", "lots"])
    assert result.exit_code == 2 and "lots" in result.output and not (tmp_path / "o").exists()
    assert re.search(r"KB|MB|GB", result.output)
