"""Every command block of README.md and docs/*.md runs as written (issue 26 deliverable 6): an example that fails
fails the suite.  The conventions a block follows are in tests/docs/blocks.py and docs/README.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import EXITS, REPO, Block, all_blocks, console_commands, expecting_exits, without_pip_install

BLOCKS = all_blocks()
VLLM_VENV = Path.home() / ".cache" / "eagleconv-ci" / "vllm-0.32.0"
SHARED = ("fixtures", "benchmarks", ".ci", "tests")
_workdirs: dict[Path, Path] = {}


from tests.support.ci_cache import llamacpp_build as _llamacpp, smollm2_pair as _smollm2  # noqa: E402


def _gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _missing(need: str) -> str | None:
    """Why ``need`` is not available here, or None when it is."""
    if need == "vllm":
        return None if (VLLM_VENV / "bin" / "vllm").exists() else f"needs vLLM: no venv at {VLLM_VENV}"
    if need == "llama.cpp":
        return None if _llamacpp() else "needs llama.cpp: no cached build (bash .ci/llamacpp-env)"
    if need == "smollm2":
        return None if _smollm2() else "needs the SmolLM2 pair: not built (bash .ci/smollm2)"
    if need == "gpu":
        return None if _gpu() else "needs a CUDA GPU"
    if need == "server":
        return "starts or asks a long-running vLLM or llama-server (.ci/measure-servers runs real ones)"
    if need == "ci":
        return "one of .ci/run's own steps: CI runs it there"
    return None  # hub: the loopback Hub of tests/support/fake_hub.py is always here


def _workdir(block: Block, factory: pytest.TempPathFactory) -> Path:
    """One directory per page, shared by its blocks in page order, holding the repository's read-only inputs."""
    if block.page not in _workdirs:
        work = factory.mktemp(block.page.stem.lower())
        for name in SHARED:
            (work / name).symlink_to(REPO / name)
        (work / "tmp").mkdir()
        shim = work / ".bin"
        shim.mkdir()
        (shim / "eagleconv").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m eagleconv "$@"\n')
        (shim / "eagleconv").chmod(0o755)
        _workdirs[block.page] = work
    return _workdirs[block.page]


def _env(work: Path, block: Block, hub_url: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(work / "tmp")}
    path = [str(work / ".bin"), str(Path(sys.executable).parent)]
    if "llama.cpp" in block.needs:
        build = _llamacpp()
        assert build
        path.append(str(build / "bin"))
        env["LD_LIBRARY_PATH"] = f"{build / 'bin'}:{env.get('LD_LIBRARY_PATH', '')}"
    if "vllm" in block.needs:
        path.append(str(VLLM_VENV / "bin"))
    if "smollm2" in block.needs:
        env["PAIR"] = str(_smollm2())
    env["PATH"] = ":".join([*path, env.get("PATH", "")])
    if hub_url:
        env.update(HF_HUB_OFFLINE="0", HF_ENDPOINT=hub_url, HF_TOKEN=_hub_token(), HF_HOME=str(work / "hf-home"))
    return env


def _hub_token() -> str:
    from tests.support.fake_hub import TOKEN

    return TOKEN


def _text(block: Block, work: Path) -> str:
    return without_pip_install(block.text).replace("/tmp/", f"{work}/tmp/") if block.lang != "python" \
        else block.text.replace('"/tmp/', f'"{work}/tmp/')


def _run_shell(script: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def loopback_hub():
    from tests.support.fake_hub import FakeHub

    server = FakeHub().start()
    yield server
    server.stop()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block_runs(block: Block, tmp_path_factory, loopback_hub):
    for need in block.needs:
        reason = _missing(need)
        if reason:
            pytest.skip(reason)
    work = _workdir(block, tmp_path_factory)
    env = _env(work, block, loopback_hub.url if "hub" in block.needs else None)
    text = _text(block, work)
    where = f"{block.page.relative_to(REPO)}:{block.line}"
    if block.lang == "python":
        script = work / "tmp" / f"block-{block.line}.py"
        script.write_text(text)
        result = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, f"{where}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    elif block.lang == "console":
        commands = console_commands(text)
        assert commands, f"{where}: a console block without a '$ ' command"
        for command, shown in commands:
            result = _run_shell(command, work, env)
            said = EXITS.match(command)
            if said:
                ok = result.returncode == int(said.group("code"))
            elif any(line.startswith("eagleconv: error") for line in shown):
                ok = result.returncode != 0
            else:
                ok = result.returncode == 0
            assert ok, f"{where}: `{command}` exit {result.returncode}\n{result.stdout}\n{result.stderr}"
            printed = result.stdout + result.stderr
            missing = [line for line in shown if line.strip() and "..." not in line and line.strip() not in printed]
            assert not missing, f"{where}: `{command}` did not print what the page shows: {missing}\n{printed}"
    else:
        result = _run_shell(expecting_exits(text), work, env)
        assert result.returncode == 0, f"{where}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def test_every_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert pages and [p for p in pages if f"docs/{p}" not in readme] == []


def test_the_blocks_cover_readme_and_docs():
    """The collector sees the pages' examples (a fence it misread would silently run nothing)."""
    pages = {b.page.name for b in BLOCKS}
    assert "README.md" in pages and len(pages) >= 6
    assert shutil.which("bash")


def test_every_pair_file_a_page_names_is_one_smollm2_builds():
    """issue 35 item 1: docs/llamacpp.md read "$PAIR/llamacpp-target-f32.gguf", which only .ci/llamacpp-parity made,
    so a user's fresh PAIR failed at step 2.  Every "$PAIR/NAME" a page reads is written by fixtures/smollm2/build.py."""
    import re

    build = (REPO / "fixtures" / "smollm2" / "build.py").read_text()
    named = {m for page in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
             for m in re.findall(r"\$PAIR/([A-Za-z0-9_.-]+)", page.read_text())}
    assert named and [n for n in sorted(named) if f'"{n}"' not in build] == []


def test_the_llamacpp_pages_blocks_are_not_hidden_from_the_suite():
    """The serve line a user copies runs where llama.cpp and the pair are cached: no `server` marker skips it, and
    it carries the flags CI serves with (one sleeping thread, the /metrics counters measure reads)."""
    page = [b for b in BLOCKS if b.page.name == "llamacpp.md"]
    assert page and all(set(b.needs) <= {"llama.cpp", "smollm2"} for b in page), [(b.id, b.needs) for b in page]
    serve = [b.text for b in page if "llama-server -m" in b.text]
    assert serve and all(flag in serve[0] for flag in ("-t 1", "--poll 0", "--metrics"))
