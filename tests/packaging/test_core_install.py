"""Issue 17: the core install (no torch, no transformers) runs convert, inspect, validate and lint; what needs
the `forward` extra says so in one line, exit 2; the declared floors (huggingface_hub 0.30, transformers 4.51.3) work.

Self-contained (no conftest fixtures, no torch at import): `.ci/floors` runs this file with --noconftest in a
virtualenv that holds only the core floors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
BLOCKED = ("torch", "transformers")

# Run in a child: hide torch and transformers (a meta-path finder that refuses them, as if not installed),
# then run the CLI (argv) or, with --batch FILE, each argv listed in FILE through click's runner, printing
# {"results": [[exit code, output], ...], "imported": [blocked modules something tried to import]}.
CHILD = r"""
import importlib.abc, json, sys
blocked, tried = sys.argv[1].split(","), set()

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if blocked != [""] and name.partition(".")[0] in blocked:
            tried.add(name.partition(".")[0])
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
if sys.argv[2] == "--batch":
    from click.testing import CliRunner
    from eagleconv.cli.main import cli
    runs = [CliRunner().invoke(cli, args) for args in json.load(open(sys.argv[3]))]
    print(json.dumps({"results": [[r.exit_code, r.output] for r in runs], "imported": sorted(tried)}))
elif sys.argv[2] == "--python":
    exec(sys.argv[3])
else:
    from eagleconv.cli.main import main
    sys.argv = ["eagleconv", *sys.argv[2:]]
    main()
"""


def child(blocked: tuple[str, ...], *args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf")}
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-c", CHILD, ",".join(blocked), *args], capture_output=True, text=True,
                          env=env, cwd=tmp, timeout=600)


def drafter_fixtures() -> list[Path]:
    """The shipped drafters with safetensors weights (the EAGLE one is a pickle; tiny-pair holds two and a target)."""
    tops = [p for p in sorted(FIXTURES.iterdir()) if any(p.glob("*.safetensors"))]
    return [*tops, FIXTURES / "tiny-pair" / "eagle3", FIXTURES / "tiny-pair" / "eagle31"]


def batch(blocked: tuple[str, ...], runs: list[list[str]], tmp: Path) -> dict:
    (tmp / "runs.json").write_text(json.dumps(runs))
    proc = child(blocked, "--batch", str(tmp / "runs.json"), tmp=tmp)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_convert_inspect_validate_lint_run_without_torch_and_transformers(tmp_path):
    """Every core command on every fixture: with torch and transformers hidden, the same exit code, report and
    written bytes as with them importable, and nothing even tries to import them."""
    fixtures = drafter_fixtures()
    assert len(fixtures) >= 8

    def runs(out: str) -> list[list[str]]:
        commands = []
        for n, f in enumerate(fixtures):
            commands += [["inspect", str(f), "--json"], ["validate", str(f), "--engine", "all", "--json"],
                         ["lint", str(f / "config.json"), "--json"],
                         ["convert", str(f), str(tmp_path / out / str(n)), "--to", "vllm", "--json"]]
        return commands

    hidden, plain = batch(BLOCKED, runs("hidden"), tmp_path), batch((), runs("plain"), tmp_path)
    assert hidden["imported"] == [], f"a core command tried to import {hidden['imported']}"
    for args, (code, output), (plain_code, plain_output) in zip(runs("hidden"), hidden["results"], plain["results"]):
        assert code in (0, 1) and code == plain_code, (args, output)  # findings at most, never an error
        if args[0] == "convert":
            written = Path(args[2])
            assert code == 0 and tree(written) == tree(tmp_path / "plain" / written.name) != {}, (args, output)
        else:
            assert json.loads(output) == json.loads(plain_output), args


def test_validate_target_without_transformers_reads_the_same_numbers(tmp_path):
    """validate --target uses transformers' config classes when installed, the raw config.json when not."""
    pair = FIXTURES / "tiny-pair"
    runs = [["validate", str(pair / name), "--target", str(pair / "target"), "--json"]
            for name in ("eagle3", "eagle31")]
    hidden, plain = batch(BLOCKED, runs, tmp_path), batch((), runs, tmp_path)
    assert "torch" not in hidden["imported"]
    for (code, output), (plain_code, plain_output) in zip(hidden["results"], plain["results"]):
        assert code in (0, 1) and (code, json.loads(output)) == (plain_code, json.loads(plain_output))


FORWARD_COMMANDS = {
    "validate --forward": ["validate", "{eagle31}", "--forward", "--steps", "1"],
    "validate --forward --target": ["validate", "{eagle31}", "--forward", "--target", "{target}"],
    "diff": ["diff", "{eagle3}", "{eagle31}"],
    "simulate": ["simulate", "{eagle31}", "--target", "{target}", "--target-runtime", "transformers"],
    "upgrade": ["upgrade", "{eagle3}", "{out}"],
    "downgrade": ["downgrade", "{eagle31}", "{out}", "--allow-lossy"],
    "convert --allow-pickle": ["convert", str(FIXTURES / "eagle-llama-eagle3"), "{out}", "--to", "vllm",
                               "--allow-pickle"],
}


@pytest.mark.parametrize("name", sorted(FORWARD_COMMANDS))
def test_forward_commands_name_the_extra_without_torch(name, tmp_path):
    pair = FIXTURES / "tiny-pair"
    args = [a.format(eagle3=pair / "eagle3", eagle31=pair / "eagle31", target=pair / "target", out=tmp_path / "out")
            for a in FORWARD_COMMANDS[name]]
    proc = child(BLOCKED, *args, tmp=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "pip install 'eagleconv[forward]'" in lines[0] and "torch" in lines[0], lines[0]
    assert lines[0].startswith("eagleconv: error: ") and "internal error" not in lines[0]
    assert not (tmp_path / "out").exists()
    if name == "convert --allow-pickle":
        assert "pytorch_model.bin" in lines[0]  # names the file that needed it


def test_library_raises_a_typed_missing_extra_error(tmp_path):
    code = """
import json
from eagleconv.errors import EagleconvError, MissingExtraError
out = {}
for what in ("import eagleconv.forward", "import eagleconv.synthetic as s; s.make_drafter('d')",
             "import eagleconv; eagleconv.load('x')"):
    try:
        exec(what)
    except MissingExtraError as exc:
        out[what] = [isinstance(exc, ImportError), isinstance(exc, EagleconvError), exc.extra, exc.name,
                     exc.exit_code, str(exc)]
print(json.dumps(out))
"""
    proc = child(BLOCKED, "--python", code, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    caught = json.loads(proc.stdout)
    assert len(caught) == 3, caught
    for what, (is_import, is_ours, extra, module, exit_code, text) in caught.items():
        assert (is_import, is_ours, extra, module, exit_code) == (True, True, "forward", "torch", 2), what
        assert "pip install 'eagleconv[forward]'" in text and "\n" not in text
    assert not (tmp_path / "d").exists()


def test_offline_works_without_is_offline_mode(monkeypatch):
    """huggingface_hub before 1.0 has constants.HF_HUB_OFFLINE but no is_offline_mode() (the 0.30 floor)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    from eagleconv.hub import offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if hasattr(constants, "is_offline_mode"):
        monkeypatch.delattr(constants, "is_offline_mode")
    for value in (True, False):
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", value)
        assert offline() is value


def test_transformers_target_loads_in_float32_at_any_supported_transformers():
    """At the transformers floor (4.51.3, `.ci/floors`) from_pretrained takes torch_dtype, not dtype."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import warnings

    import torch

    from eagleconv.forward.inputs import Target

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*torch_dtype.*")  # the deprecated name is not used where dtype is
        target = Target(FIXTURES / "tiny-pair" / "target")
    assert {p.dtype for p in target.model.parameters()} == {torch.float32}
    assert target.num_layers == json.loads((FIXTURES / "tiny-pair" / "target" / "config.json").read_text())[
        "num_hidden_layers"]


def project() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_core_install_has_no_torch_and_the_extras_do():
    from packaging.requirements import Requirement

    core = {Requirement(r).name for r in project()["dependencies"]}
    assert not core & {"torch", "transformers", "triton"}, core  # so any torch (2.9.1 too) can sit beside it
    extras = {name: [Requirement(r) for r in reqs] for name, reqs in project()["optional-dependencies"].items()}
    forward = {r.name: r for r in extras["forward"]}
    assert set(forward) == {"torch", "transformers"}
    assert not forward["torch"].specifier.contains("2.9.1") and forward["torch"].specifier.contains("2.13.0")

    def closure(extra: str) -> set[str]:
        out = set()
        for r in extras[extra]:
            out |= closure_of(r)
        return out

    def closure_of(r) -> set[str]:
        return set().union(*(closure(e) for e in r.extras)) if r.name == "eagleconv" else {r.name}

    assert {"torch", "transformers", "triton"} <= closure("all")
    assert {"torch", "transformers", "triton", "pytest", "hypothesis"} <= closure("test")


def test_every_declared_requirement_has_the_floor_the_floors_job_installs():
    """`.ci/floors` pins each `>=X` to `==X`: a requirement without one lower bound would go untested."""
    from packaging.requirements import Requirement

    texts = [*project()["dependencies"], *(r for reqs in project()["optional-dependencies"].values() for r in reqs)]
    for req in map(Requirement, texts):
        if req.name != "eagleconv":
            assert len([s for s in req.specifier if s.operator == ">="]) == 1, req
    floors = (REPO / ".ci" / "floors").read_text()
    assert "pyproject.toml" in floors and "tests/packaging/test_core_install.py" in floors


def test_measure_runs_without_torch_and_transformers(tmp_path):
    """measure (issue 25) is a core command: against a real HTTP server on 127.0.0.1, with torch and transformers
    hidden, it measures and nothing tries to import them."""
    from tests.support.fake_server import FakeServer

    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([[1, 17, 42, 99], [1, 5, 5, 64, 128]]))
    server = FakeServer().start()
    try:
        out = batch(BLOCKED, [["measure", server.url, "--prompts", str(prompts), "--max-tokens", "12", "--json"]],
                    tmp_path)
    finally:
        server.stop()
    assert out["imported"] == [], f"measure tried to import {out['imported']}"
    (code, output), = out["results"]
    assert code == 0, output
    assert json.loads(output)["num_drafts"] > 0
