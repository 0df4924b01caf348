"""The CLI contract: exit codes, one-line errors, --json is the library's report, no torch on fast paths."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.conftest import edit_config
from eagleconv.cli.main import cli
from eagleconv.spec.report import ConvertReport, InspectReport


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_inspect_json_reports_eagle_version(drafter):
    plain = drafter(producer="specforge")
    v31 = drafter(producer="specforge", eagle31=True)
    r3 = run("inspect", str(plain), "--json")
    r31 = run("inspect", str(v31), "--json")
    assert r3.exit_code == 0 and r31.exit_code == 0
    a, b = InspectReport.model_validate_json(r3.output), InspectReport.model_validate_json(r31.output)
    assert (a.eagle_version, a.eagle31_flags) == ("3", [])
    assert (b.eagle_version, b.eagle31_flags) == ("3.1", ["fc_norm", "norm_output"])
    assert b.format == "specforge" and b.architecture == "llama"
    assert b.aux_layer_ids == [1, 7, 12] and b.aux_layer_convention == "layer_output"
    assert b.aux_layer_ids_hidden_state_index == [2, 8, 13]
    assert b.vocab.compressed and b.vocab.d2t and b.vocab.t2d
    assert {t.name for t in b.tensors} >= {"fc.weight", "fc_norm.2.weight", "midlayer.self_attn.q_proj.weight"}


def test_inspect_human_output(drafter):
    result = run("inspect", str(drafter(producer="torchspec", architecture="deepseek_mla", eagle31=True)))
    assert result.exit_code == 0
    assert "3.1" in result.output and "deepseek_mla" in result.output and "kv_a_proj_with_mqa" in result.output


def test_convert_json_is_the_library_report(drafter, tmp_path):
    src = drafter(producer="specforge")
    result = run("convert", str(src), str(tmp_path / "out"), "--to", "vllm", "--json")
    assert result.exit_code == 0, result.output
    report = ConvertReport.model_validate_json(result.output)
    assert report.ok and report.destination_format == "vllm" and "model.safetensors" in report.files_written


def test_dry_run_table(drafter, tmp_path):
    result = run("convert", str(drafter(producer="specforge")), str(tmp_path / "out"), "--to", "vllm", "--dry-run")
    assert result.exit_code == 0
    assert "midlayer.mlp.up_proj" in result.output and "copy" in result.output
    assert not (tmp_path / "out").exists()


def test_destination_inside_source_exit_2_nothing_written(drafter):
    src = drafter(producer="specforge")
    result = CliRunner().invoke(cli, ["convert", str(src), str(src / "sub"), "--to", "speculators"])
    assert result.exit_code == 2
    assert "never writes where it reads" in result.output
    assert not (src / "sub").exists()
    assert "Traceback" not in result.output


def test_findings_exit_1_one_line_no_traceback(drafter, tmp_path):
    src = drafter(producer="vllm")
    edit_config(src, intermediate_size=96)
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "out"), "--to", "speculators"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    error_lines = [ln for ln in result.output.splitlines() if ln.startswith("eagleconv: error:")]
    assert len(error_lines) == 1 and str(src) in error_lines[0]
    assert not (tmp_path / "out").exists()


def test_unsafe_input_exit_2_and_debug_shows_traceback(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text('{"a": NaN}')
    (d / "model.safetensors").write_bytes(b"\0" * 16)
    result = CliRunner().invoke(cli, ["inspect", str(d)])
    assert result.exit_code == 2 and "NaN" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["--debug", "inspect", str(d)])
    assert result.exit_code == 2 and "Traceback" in result.output


def test_json_error_output_is_machine_readable(tmp_path):
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "missing"), "--json"])
    assert result.exit_code == 2
    payload = json.loads(result.output.splitlines()[0])
    assert payload["ok"] is False and payload["exit_code"] == 2 and "no such file" in payload["error"]


def test_bad_usage_exit_2(drafter, tmp_path):
    result = CliRunner().invoke(cli, ["convert", str(drafter()), str(tmp_path / "o"), "--to", "gguf"])
    assert result.exit_code == 2


def test_help_and_inspect_do_not_import_torch(drafter):
    src = drafter(producer="specforge")
    code = ("import sys; from eagleconv.cli.main import main; sys.argv=['eagleconv'] + sys.argv[1:]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    for args in (["--help"], ["inspect", str(src)], ["inspect", str(src), "--json"], ["formats"]):
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
        assert proc.returncode == 0, (args, proc.stderr)


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "eagleconv", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and "eagleconv" in proc.stdout


def test_schema_command_writes_schemas(tmp_path):
    result = run("schema", "--out", str(tmp_path))
    assert result.exit_code == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "drafter-spec.schema.json" in names and "config-speculators-eagle3.schema.json" in names


def test_inspect_of_an_inconsistent_drafter_exits_1(drafter):
    src = drafter(producer="specforge")
    edit_config(src, num_attention_heads=None)
    result = CliRunner().invoke(cli, ["inspect", str(src)])
    assert result.exit_code == 1 and "num_attention_heads" in result.output and "Traceback" not in result.output


def test_validate_strict_turns_warnings_into_exit_1(drafter, tmp_path):
    src = drafter(producer="automodel")  # no aux ids recorded: EC010 is a warning
    out = tmp_path / "v"
    assert run("convert", str(src), str(out), "--to", "vllm").exit_code == 0
    plain = CliRunner().invoke(cli, ["validate", str(out), "--json"])
    strict = CliRunner().invoke(cli, ["validate", str(out), "--strict", "--json"])
    assert plain.exit_code == 0 and strict.exit_code == 1
    assert any(f["code"] == "EC010" and f["severity"] == "warning" for f in json.loads(strict.output)["findings"])


def test_cli_format_choices_are_the_registry():
    from eagleconv.cli.main import FORMATS
    from eagleconv.formats import LAYOUTS

    assert set(FORMATS) == set(LAYOUTS)


def test_validate_against_a_synthetic_target_config(drafter, tmp_path):
    from eagleconv.synthetic import TinyDims, make_target_config

    src = drafter(producer="vllm")
    target = make_target_config(tmp_path / "target")
    ok = CliRunner().invoke(cli, ["validate", str(src), "--target", str(target), "--no-numeric", "--json"])
    payload = json.loads(ok.output)
    assert not any(f["code"] in ("EC052", "EC013") for f in payload["findings"]), payload["findings"]
    short = make_target_config(tmp_path / "short", dims=TinyDims(target_layers=8))
    bad = CliRunner().invoke(cli, ["validate", str(src), "--target", str(short), "--no-numeric", "--json"])
    assert bad.exit_code == 1 and any(f["code"] == "EC013" for f in json.loads(bad.output)["findings"])


@pytest.mark.parametrize("numeric", [True, False])
def test_rename_only_convert_imports_neither_torch_nor_rich(drafter, tmp_path, numeric):
    """The streaming path stays light: these imports alone would cost more than copying a small drafter.

    The NaN/Inf check needs numpy (one masked max per MiB); --no-numeric imports none of them.
    """
    src = drafter(producer="specforge")
    heavy = "{'torch', 'rich'}" if numeric else "{'torch', 'numpy', 'rich'}"
    code = ("import sys; from eagleconv.cli.main import main; sys.argv=['eagleconv'] + sys.argv[1:]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            f"heavy = sorted({heavy} & set(sys.modules))\n"
            "assert not heavy, heavy\n"
            f"assert ('numpy' in sys.modules) == {numeric}\n")
    extra = [] if numeric else ["--no-numeric"]
    proc = subprocess.run([sys.executable, "-c", code, "convert", str(src), str(tmp_path / "out"), "--to", "vllm", *extra],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "model.safetensors").exists()
