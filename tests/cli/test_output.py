"""What a new user hits first (issue 17): output through a pipe or a narrow terminal, progress, help, --json
schemas, sizes.

Outputs are captured from real ``python -m eagleconv`` processes: through a real pipe (COLUMNS unset), and
through a pseudo-terminal (os.openpty) of a set width for the terminal cases.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import jsonschema
import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli, parse_size
from eagleconv.io.safetensors_header import read_header
from tests.support.terminal import _env, on_terminal, piped

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "specforge-llama-eagle31"
PAIR = REPO / "fixtures" / "tiny-pair"
def tensor_names(directory: Path) -> list[str]:
    return sorted(name for f in directory.glob("*.safetensors") for name in read_header(f).entries)


# -- item 4: a pipe or a narrow terminal never cuts a name or a number ----------------------------------------

def test_piped_dry_run_shows_every_tensor_name_in_full(tmp_path):
    plan = json.loads(piped("convert", str(FIXTURE), str(tmp_path / "o"), "--to", "vllm", "--dry-run", "--json").stdout)
    result = piped("convert", str(FIXTURE), str(tmp_path / "o"), "--to", "vllm", "--dry-run")
    assert result.returncode == 0, result.stderr
    destinations = [row["destination"] for row in plan["plan"] if row["destination"]]
    assert len(destinations) > 10 and any(len(name) > 30 for name in destinations)
    for name in tensor_names(FIXTURE) + destinations:
        assert re.search(rf"(^|\s){re.escape(name)}(\s|$)", result.stdout, re.M), name
    assert "…" not in result.stdout


def test_piped_formats_and_engine_table_are_whole():
    from eagleconv.formats import LAYOUTS

    result = piped("formats")
    assert result.returncode == 0 and "…" not in result.stdout
    for layout in LAYOUTS.values():
        assert layout.description in result.stdout and layout.producer in result.stdout

    report = json.loads(piped("validate", str(FIXTURE), "--forward", "--engine", "all", "--steps", "8", "--json").stdout)
    result = piped("validate", str(FIXTURE), "--forward", "--engine", "all", "--steps", "8")
    assert "…" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if "engine" in line and "loads" in line)
    assert "max abs err" in header and all(f" {k} " in header for k in range(1, 9))
    for engine in report["forward"]["engines"]:
        assert engine["engine"] in result.stdout


def _column(text: str, index: int) -> str:
    """The text of column ``index`` of the first box-drawn table in ``text``, its folded pieces joined."""
    pieces = [line.split("│")[index + 1].strip() for line in text.splitlines() if line.startswith("│")]
    return "".join(pieces)


def test_narrow_terminal_folds_cells_instead_of_cutting_them(tmp_path):
    plan = json.loads(piped("convert", str(FIXTURE), str(tmp_path / "o"), "--to", "vllm", "--dry-run", "--json").stdout)
    code, text = on_terminal("convert", str(FIXTURE), str(tmp_path / "o"), "--to", "vllm", "--dry-run", columns=60)
    assert code == 0, text
    assert "…" not in text
    table = [line for line in text.splitlines() if line[:1] in ("┏", "┃", "┡", "│", "└")]
    assert len(table) > len(plan["plan"]) and max(len(line) for line in table) <= 60  # folded: more lines
    assert _column(text, 0) == "".join(row["source"] or "-" for row in plan["plan"])
    assert _column(text, 1) == "".join(row["destination"] or "-" for row in plan["plan"])


# -- item 8: progress on stderr when it is a terminal, with --json too; never in a pipe --------------------------

def test_upgrade_shows_divergence_progress_on_a_terminal_and_keeps_json_clean(drafter, tmp_path):
    src = drafter(producer="specforge")
    out = tmp_path / "stdout.json"
    code, stderr = on_terminal("upgrade", str(src), str(tmp_path / "up"), "--json", columns=120, stdout_file=out)
    assert code == 0, stderr
    report = json.loads(out.read_text())
    assert report["divergence"] and not report["exact"]
    assert "divergence: the source drafter" in stderr and "divergence: the upgraded drafter" in stderr
    assert re.search(r"writing .*\d KiB/\d+\.\d KiB", stderr) and " kB" not in stderr  # binary units, as the summary

    result = subprocess.run([sys.executable, "-m", "eagleconv", "upgrade", str(src), str(tmp_path / "up2")],
                            capture_output=True, text=True, env=_env(COLUMNS="80"), timeout=300)
    assert result.returncode == 0 and result.stderr == ""  # a pipe: no bar, no escape codes


def test_simulate_shows_token_progress_on_a_terminal(tmp_path):
    out = tmp_path / "stdout.json"
    code, stderr = on_terminal("simulate", str(PAIR / "eagle3"), "--target", str(PAIR / "target"), "--max-tokens", "6",
                               "--json", columns=120, stdout_file=out)
    assert code == 0, stderr
    report = json.loads(out.read_text())
    planned = len(report["tokens"]) * 6
    assert "generating tokens" in stderr and f"{planned}/{planned}" in stderr


def test_library_progress_callbacks_count_the_work(drafter, tmp_path):
    from eagleconv.eagle31.api import MEASURE_STEPS, upgrade
    from eagleconv.simulation import simulate

    calls: list[tuple[str, int, int]] = []
    upgrade(drafter(producer="specforge"), tmp_path / "up", progress=lambda *a: calls.append(a))
    whats = list(dict.fromkeys(what for what, _, _ in calls))
    assert whats == ["divergence: the source drafter", "divergence: the upgraded drafter",
                     "divergence: unit norm weights"]
    assert all(calls[i + 1][1] >= calls[i][1] for i in range(len(calls) - 1) if calls[i][0] == calls[i + 1][0])
    assert all(done == total for what in whats for (w, done, total) in [max(c for c in calls if c[0] == what)])
    assert {total for _, _, total in calls} == {MEASURE_STEPS}  # one synthetic batch: counted per draft step
    assert len(calls) == 3 * (MEASURE_STEPS + 1)

    calls.clear()
    report = simulate(PAIR / "eagle3", PAIR / "target", [[1, 5, 9]], max_tokens=5, progress=lambda *a: calls.append(a))
    generated = [c for c in calls if c[0] == "generating tokens"]
    assert generated[-1] == ("generating tokens", 5, 5) and len(report.tokens[0]) == 5
    assert [d for _, d, _ in generated] == sorted(d for _, d, _ in generated)


# -- item 9: one unit, help texts, --json schemas ----------------------------------------------------------------

def _commands() -> list[tuple[str, click.Command]]:
    return [("eagleconv", cli), *sorted(cli.commands.items())]


@pytest.mark.parametrize("name,command", _commands(), ids=[n for n, _ in _commands()])
def test_every_option_has_its_own_help_text(name, command):
    ctx = click.Context(command, info_name=name)
    seen: dict[str, list[str]] = {}
    for param in command.get_params(ctx):
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help and param.help.strip(), f"{name} {param.opts[0]} has no help text"
            assert param.help not in seen, f"{name} {param.opts[0]} repeats the help of {seen[param.help][0]}"
            seen[param.help] = param.opts
    text = CliRunner().invoke(command, ["--help"], prog_name=name).output
    assert all(opt in text for opts in seen.values() for opt in opts)


def test_upgrade_and_downgrade_describe_calibration_for_what_each_does():
    helps = {name: next(p.help for p in cli.commands[name].params if p.name == "calibration")
             for name in ("upgrade", "downgrade")}
    assert helps["upgrade"] != helps["downgrade"]
    assert "fold" in helps["downgrade"] and "new norm" in helps["upgrade"]


def _schema(name: str) -> dict:
    return json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())


def test_json_errors_match_the_published_error_schema(drafter, tmp_path):
    from tests.conftest import edit_config

    broken = drafter(producer="specforge")
    edit_config(broken, hidden_size=48)  # fc, norms and projections no longer match: error findings
    cases = [(("inspect", str(tmp_path / "missing"), "--json"), 2),
             (("convert", str(broken), str(tmp_path / "o"), "--to", "vllm", "--json"), 1),
             (("simulate", str(FIXTURE), "--target", str(tmp_path), "--json"), 2)]
    for args, exit_code in cases:
        result = piped(*args)
        assert result.returncode == exit_code, (args, result.stderr)
        lines = result.stdout.splitlines()
        assert len(lines) == 1, result.stdout
        error = json.loads(lines[0])
        jsonschema.validate(error, _schema("error"))
        assert error["exit_code"] == exit_code and error["error"] in result.stderr
    assert not (tmp_path / "o").exists()


def test_simulate_json_matches_the_published_schema():
    result = piped("simulate", str(PAIR / "eagle31"), "--target", str(PAIR / "target"), "--max-tokens", "4", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, _schema("report-simulate"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "num_drafts": "three"}, _schema("report-simulate"))


# -- item 10: our own size parser --------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("2GB", 2 * 10**9), ("500MB", 500 * 10**6), ("64KB", 64_000), ("1TB", 10**12),  # powers of 10, as hub's
    ("2GiB", 2 * 2**30), ("512MiB", 2**29), ("4KiB", 4096), ("1TiB", 2**40),  # powers of 2, as eagleconv prints
    ("2gb", 2 * 10**9), ("2gib", 2 * 2**30), (" 3 MB ", 3 * 10**6), ("1.5GB", 1_500_000_000), (".5KiB", 512),
    ("1.0009KB", 1000),  # fractions are exact and round down to whole bytes
])
def test_sizes_in_decimal_and_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["0GB", "0.0001KB", "-1GB", "1e3MB", "infGB", "nanGB", "10", "2", "lots", "",
                                  "2 G B", "1.GB", "2PB", "GB"])
def test_bad_sizes_are_usage_errors_naming_the_option(text, drafter, tmp_path):
    with pytest.raises(click.BadParameter) as excinfo:
        parse_size(text)
    assert "--max-shard-size" in (excinfo.value.param_hint or "")
    result = CliRunner().invoke(cli, ["convert", str(drafter()), str(tmp_path / "o"), "--to", "vllm",
                                      "--max-shard-size", text])
    assert result.exit_code == 2 and "--max-shard-size" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_binary_shard_size_splits_the_output(drafter, tmp_path):
    src = drafter()
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "o"), "--to", "vllm", "--max-shard-size",
                                      "4KiB"])
    assert result.exit_code == 0, result.output
    shards = sorted((tmp_path / "o").glob("*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "o" / "model.safetensors.index.json").is_file()
    assert tensor_names(tmp_path / "o") == sorted(json.loads(
        (tmp_path / "o" / "model.safetensors.index.json").read_text())["weight_map"])


@pytest.mark.parametrize("args,says", [
    (("convert", "--json"), "Missing argument 'SRC'"),
    (("convert", str(FIXTURE), "{out}", "--json"), "Missing option '--to'"),
    (("convert", str(FIXTURE), "{out}", "--to", "nope", "--json"), "Invalid value for '--to'"),
    (("validate", "--json"), "Missing argument"),
], ids=["missing-argument", "missing-to", "bad-choice", "validate-missing-argument"])
def test_clicks_usage_errors_under_json_print_the_error_object(args, says, tmp_path):
    """issue 35 item 9: click's own usage errors printed only its usage text, no JSON, under --json."""
    result = piped(*(a.format(out=tmp_path / "o") for a in args))
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    error = json.loads(lines[0])
    jsonschema.validate(error, _schema("error"))
    assert says in error["error"] and error["exit_code"] == 2
    assert result.stderr == f"eagleconv: error: {error['error']}\n"
    assert not (tmp_path / "o").exists()


def test_clicks_usage_errors_without_json_keep_clicks_usage_text():
    result = piped("convert")
    assert result.returncode == 2 and result.stdout == "" and "Usage: eagleconv convert" in result.stderr
