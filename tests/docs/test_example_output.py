"""Examples a new user copies (issue 27 items 3 and 13) print what their page shows: the diff example's JSON
shape and the in-memory validation's verdict.  Blocks are read from the pages themselves, so an edit of the
example is what is tested (tests/docs/test_command_blocks.py runs every block; these also check the output)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORWARD = (REPO / "docs" / "forward-and-kernels.md").read_text()
VALIDATE = (REPO / "docs" / "validate.md").read_text()


def _block_after(page: str, heading: str, lang: str) -> str:
    """The first ```lang block after the line ``heading``."""
    start = page.index(heading)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(page, start)
    assert match, heading
    return match.group(1)


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "eagleconv", *argv], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def test_diff_example_runs_as_written_and_prints_the_shape_shown(tmp_path):
    block = _block_after(FORWARD, "## Comparing two drafters, and the library", "bash")
    commands = [shlex.split(line) for line in block.splitlines() if line.startswith("eagleconv ")]
    assert [c[1] for c in commands] == ["convert", "diff"]
    out = tmp_path / "spec"
    for argv in commands:
        argv = [str(out) if a == "/tmp/spec" else a for a in argv[1:]]
        argv = [str(REPO / a) if a.startswith("fixtures/") else a for a in argv]
        result = _run(argv, tmp_path)
        assert result.returncode == 0, (argv, result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert report["identical"] is True and report["steps"][0]["step"] == 1
    # the page shows the indented shape `diff --json` prints: its first lines, verbatim
    shown = FORWARD[FORWARD.index("`--json` prints the report indented"):]
    shown = re.compile(r"```\n(.*?)```", re.S).search(shown).group(1).splitlines()
    printed = result.stdout.splitlines()
    assert printed[:len(shown[:9])] == shown[:9]
    for key in ("a", "b"):
        assert f'  "{key}": ' in result.stdout and any(line.startswith(f'  "{key}": ') for line in shown)


def test_training_loop_example_runs_and_prints_what_it_says(tmp_path):
    """The in-memory example: the engine that flags the drafter is the one the comment names, and the vLLM-only
    gate it asserts holds (it asserted report.ok for ("vllm", "sglang"), which SGLang's EC012 fails)."""
    import contextlib
    import io

    block = _block_after(VALIDATE, "From a training loop, on an in-memory state dict", "python")
    printed = io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(block, "docs/validate.md", "exec"), {})
    finally:
        os.chdir(cwd)
    shown = re.search(r"print\(report\.ok, errors\)  # (.*?):", block).group(1)
    assert printed.getvalue().strip() == shown
