"""Output that fits where it goes (issue 27 item 4, deliverable 3): COLUMNS is honoured; a pipe or a file without
COLUMNS gets the plain layout (one row per line, no box drawing, names never cut); --json is unchanged.

Real ``python -m eagleconv`` processes with stdout a real pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "vllm-qwen3-eagle31"
SPECFORGE = REPO / "fixtures" / "specforge-llama-eagle31"
BOX = re.compile("[\u2500-\u257f]")  # box drawing


def run(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
    env["PYTHONPATH"] = str(REPO)
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, env=env,
                          timeout=300)


COMMANDS = {
    "validate": ["validate", str(FIXTURE), "--engine", "all"],
    "inspect": ["inspect", str(FIXTURE)],
    "lint": ["lint", str(SPECFORGE / "config.json"), "--engine", "all"],
    "convert --dry-run": ["convert", str(SPECFORGE), "{tmp}/out", "--to", "vllm", "--dry-run"],
    "formats": ["formats"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_piped_without_columns_is_plain_one_row_per_line(name, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[name]]
    result = run(*args)
    assert result.returncode in (0, 1), result.stderr
    assert not BOX.search(result.stdout), result.stdout
    assert "…" not in result.stdout and not any(line != line.rstrip() for line in result.stdout.splitlines())
    if name in ("validate", "lint"):
        report = json.loads(run(*args, "--json").stdout)
        for f in report["findings"]:  # each finding whole, on one line with its code and engine
            (line,) = [ln for ln in result.stdout.splitlines() if ln.endswith(f["message"])]
            assert line.split()[:2] == [f["severity"], f["code"]], line
    if name == "inspect":
        report = json.loads(run(*args, "--json").stdout)
        for row in report["tensors"]:
            assert re.search(rf"^{re.escape(row['name'])}\s+{re.escape(str(row['shape']))}\s", result.stdout, re.M)
    if name == "convert --dry-run":
        report = json.loads(run(*args, "--json").stdout)
        for row in report["plan"]:
            assert re.search(rf"^{re.escape(row['source'] or '-')}\s+{re.escape(row['destination'] or '-')}\s",
                             result.stdout, re.M), row


@pytest.mark.parametrize("name", ["validate", "inspect", "convert --dry-run"])
def test_columns_is_honoured_in_a_pipe(name, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[name]]
    result = run(*args, columns="80")
    assert result.returncode in (0, 1), result.stderr
    table = [line for line in result.stdout.splitlines() if BOX.search(line)]
    assert table, result.stdout  # a table, drawn
    assert max(len(line) for line in table) <= 80
    assert max(len(line) for line in run(*args).stdout.splitlines()) > 80  # the same table is wider unfolded


@pytest.mark.parametrize("name", ["validate", "inspect", "lint"])
def test_json_is_the_same_whatever_the_width(name, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[name]] + ["--json"]
    assert run(*args).stdout == run(*args, columns="40").stdout == run(*args, columns="300").stdout
