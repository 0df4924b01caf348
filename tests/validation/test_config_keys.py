"""Issue 17, what a new user hits first: misspelt config keys (EC006), convert --to speculators without a
verifier, `findings CODE`, `--hide-info`, and lint explaining where it differs from validate."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import read_json
from eagleconv import architectures
from eagleconv.cli.main import cli
from eagleconv.conversion import convert
from eagleconv.errors import ConversionError
from eagleconv.formats import LAYOUTS
from eagleconv.spec.report import ValidationReport
from eagleconv.synthetic import PRODUCERS, DrafterRecipe, check_recipe, make_drafter, producer_config
from eagleconv.validation import lint, validate
from eagleconv.validation.reference import REFERENCE_PATH

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DRAFTER_FIXTURES = sorted(p.parent for p in FIXTURES.glob("**/config.json")
                          if any(p.parent.glob("*.safetensors")) or any(p.parent.glob("*.bin")))


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def ec006(report: ValidationReport, severity: str | None = None) -> list[str]:
    return [f.message for f in report.findings if f.code == "EC006" and severity in (None, f.severity)]


def rename_key(config_json: Path, old: str, new: str) -> None:
    """Rename a (dotted) config key in place, keeping its value: what a typo in a hand-edited config does."""
    cfg = read_json(config_json)
    *parents, leaf = old.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[new.split(".")[-1]] = node.pop(leaf)
    config_json.write_text(json.dumps(cfg, indent=2))


def fixture_copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


# -- EC006: a misspelt key ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture,old,new", [
    ("vllm-qwen3-eagle31", "hidden_size", "hiden_size"),  # the issue: AutoConfig then reads hidden_size = 4096
    ("vllm-qwen3-eagle31", "norm_output", "norm_ouput"),  # the issue: reported as norm_output false
    ("specforge-llama-eagle31", "norm_output", "norm_ouput"),
    ("vllm-qwen3-eagle31", "rope_theta", "rope_thetaa"),
    ("torchspec-kimi-mla-eagle31", "rms_norm_eps", "rms_norm_epsilon"),
    ("vllm-qwen3-eagle31", "eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_states_layer_ids"),
    ("modelopt-llama-eagle3", "eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_id"),
    ("speculators-llama-eagle31", "fc_norm", "fc_nrom"),
    ("speculators-llama-eagle31", "transformer_layer_config.num_key_value_heads", "num_key_value_head"),
])
def test_misspelt_math_key_is_an_error_with_did_you_mean(tmp_path, fixture, old, new):
    src = fixture_copy(fixture, tmp_path)
    rename_key(src / "config.json", old, new)
    result = run("validate", str(src), "--engine", "all", "--strict", "--no-numeric", "--allow-pickle", "--json")
    assert result.exit_code == 1, result.output
    [message] = ec006(ValidationReport.model_validate_json(result.output), "error")
    typo = ".".join([*old.split(".")[:-1], new])
    assert repr(typo) in message and f"did you mean {old!r}" in message, message


def test_norm_output_typo_is_caught_without_the_trtllm_synonym(tmp_path):
    """The issue: only eagle_config.return_hidden_post_norm restating the flag used to reveal the typo."""
    src = fixture_copy("vllm-qwen3-eagle31", tmp_path)
    rename_key(src / "config.json", "norm_output", "norm_ouput")
    report = validate(src, engines="all", numeric=False)
    assert report.flags is not None and report.flags.norm_output is False  # what the readers see...
    assert not report.ok and ec006(report, "error")  # ...and now it is said


def test_typo_of_a_key_that_is_also_present_is_a_warning(tmp_path):
    src = fixture_copy("vllm-qwen3-eagle31", tmp_path)
    cfg = read_json(src / "config.json")
    cfg["hiden_size"] = 4096  # stated twice, once misspelt: the real key is what readers use
    cfg["bos_tokn_id"] = 1  # close to transformers' bookkeeping key: harmless, still worth a word
    cfg["my_trainer_run_name"] = "abc"  # close to nothing
    (src / "config.json").write_text(json.dumps(cfg))
    report = validate(src, numeric=False)
    assert report.ok
    warnings = ec006(report, "warning")
    assert len(warnings) == 3 and not ec006(report, "error")
    by_key = {k: next(m for m in warnings if repr(k) in m) for k in ("hiden_size", "bos_tokn_id", "my_trainer_run_name")}
    assert "did you mean 'hidden_size'" in by_key["hiden_size"]
    assert "did you mean 'bos_token_id'" in by_key["bos_tokn_id"]
    assert "did you mean" not in by_key["my_trainer_run_name"] and "no effect" in by_key["my_trainer_run_name"]
    assert run("validate", str(src), "--no-numeric", "--strict").exit_code == 1


def test_misplaced_key_names_where_readers_look(tmp_path):
    src = fixture_copy("vllm-qwen3-eagle31", tmp_path)
    cfg = read_json(src / "config.json")
    cfg["use_aux_hidden_state"] = False  # vLLM reads eagle_config.use_aux_hidden_state only
    (src / "config.json").write_text(json.dumps(cfg))
    [message] = ec006(validate(src, numeric=False), "error")
    assert "did you mean 'eagle_config.use_aux_hidden_state'" in message


def test_lint_reports_the_typo_too(tmp_path):
    src = fixture_copy("vllm-qwen3-eagle31", tmp_path)
    rename_key(src / "config.json", "hidden_size", "hiden_size")
    assert ec006(lint(src / "config.json"), "error")


@pytest.mark.parametrize("written", [".rms_norm_eps", "rms_norm.eps"])
def test_a_dotted_key_near_a_math_key_is_reported_not_a_crash(tmp_path, written):
    """A key holding a dot has no config path; lint once fed its absent value into the AutoConfig type rules (fuzz)."""
    src = fixture_copy("vllm-qwen3-eagle31", tmp_path)
    cfg = read_json(src / "config.json")
    cfg[written] = cfg.pop("rms_norm_eps")  # one key, dot and all (rename_key would nest "rms_norm.eps")
    del cfg["num_attention_heads"]  # a missing shape field is what makes lint try the typo's correction
    (src / "config.json").write_text(json.dumps(cfg))
    report = lint(src / "config.json")
    assert any(repr(written) in m for m in ec006(report, "error") + ec006(report, "warning"))


def test_convert_refuses_a_source_with_a_misspelt_math_key(tmp_path):
    src = fixture_copy("vllm-qwen3-eagle31", tmp_path)
    rename_key(src / "config.json", "hidden_size", "hiden_size")
    result = run("convert", str(src), str(tmp_path / "out"), "--to", "vllm")
    assert result.exit_code == 1 and "[EC006]" in result.output and "hiden_size" in result.output
    assert not (tmp_path / "out").exists()


# -- EC006: no false alarms ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", DRAFTER_FIXTURES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_committed_fixtures_have_no_ec006(path):
    assert ec006(validate(path, engines=("all", "speculators"), numeric=False, allow_pickle=True)) == []


def _recipes() -> list[DrafterRecipe]:
    out = []
    for producer, arch, eagle31, norm_before_fc in itertools.product(PRODUCERS, architectures.names(), (False, True),
                                                                       (False, True)):
        recipe = DrafterRecipe(producer=producer, architecture=arch, eagle31=eagle31, norm_before_fc=norm_before_fc)
        try:
            check_recipe(recipe)
        except ValueError:
            continue
        out.append(recipe)
    return out


def test_every_synthetic_drafter_of_every_layout_has_no_ec006(tmp_path):
    recipes = _recipes()
    assert {r.producer for r in recipes} == {n for n, layout in LAYOUTS.items() if not layout.needs_target} == set(PRODUCERS)
    for i, recipe in enumerate(recipes):
        src = make_drafter(tmp_path / f"d{i}", recipe)
        assert ec006(validate(src, engines=("all", "speculators"), numeric=False, allow_pickle=True)) == [], recipe


@pytest.mark.parametrize("architecture", architectures.names())
def test_eagleconv_outputs_in_every_layout_have_no_ec006(tmp_path, architecture):
    src = make_drafter(tmp_path / "src", DrafterRecipe(producer="vllm", architecture=architecture))
    written = 0
    for layout in (n for n, layout in LAYOUTS.items() if not layout.needs_target):
        out = tmp_path / layout
        try:
            convert(src, out, layout, numeric=False, durable=False, verifier="org/target")
        except ConversionError:  # a layout that cannot hold this architecture (MLA in speculators, qwen3 in specforge)
            continue
        written += 1
        assert ec006(validate(out, numeric=False)) == [], layout
    assert written >= 2


@pytest.mark.parametrize("producer", PRODUCERS)
def test_transformers_bookkeeping_is_not_reported(producer):
    """transformers' own config class of each registered architecture, as save_pretrained writes it (every attribute)."""
    import transformers

    for arch in architectures.ARCHITECTURES.values():
        assert arch.transformers_model_types, f"{arch.name} names no transformers model_type"
        try:
            cfg = producer_config(DrafterRecipe(producer=producer, architecture=arch.name))
        except ValueError:
            continue
        full = transformers.AutoConfig.for_model(sorted(arch.transformers_model_types)[0]).to_dict()
        if producer == "speculators":  # the decoder is a whole transformers config nested in the file
            cfg["transformer_layer_config"] = {**full, **cfg["transformer_layer_config"]}
            cfg["transformers_version"] = full["transformers_version"]
        else:
            cfg = {**full, **cfg}
        assert ec006(lint(cfg, engines=("all", "speculators"), from_format=producer)) == [], (producer, arch.name)


# What each producer writes beyond the fields eagleconv reads (shared/reference/formats-and-peers.md, sections 1-2).
PRODUCER_EXTRAS = {
    "speculators": {"embed_requires_grad": False, "has_no_defaults_at_init": False, "auto_map": {"": "x"},
                    "speculators_version": "0.9.0"},
    "automodel": {"attn_implementation": "sdpa", "parallel_drafting": False, "mask_token_id": 5, "pard_token": 5,
                  "tie_word_embeddings": False},
    "modelopt": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 8, 13], "use_aux_hidden_state": True,
                                  "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                                  "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
                                  "parallel_draft_heads_num_layers": 1, "norm_before_fc": False,
                                  "eh_proj_before_attn": False},
                 "quantization_config": {"quant_method": "modelopt"}},
    "torchspec": {"_torchspec_version": "0.2.0", "torch_dtype": "bfloat16"},
    "specforge": {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "rope_theta": 500000.0,
                  "use_aux_norm": False},
    "vllm": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 8, 13], "layer_ids": [2, 8, 13],
                              "return_hidden_post_norm": False}, "logit_scale": 1.0},
    "eagle": {"pretraining_tp": 1, "use_cache": True, "rope_scaling": None},
}


@pytest.mark.parametrize("producer", sorted(PRODUCER_EXTRAS))
def test_what_real_producers_write_is_read_or_listed_harmless(producer):
    cfg = producer_config(DrafterRecipe(producer=producer))
    for key, value in PRODUCER_EXTRAS[producer].items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and isinstance(cfg.get(key), dict) else value
    assert ec006(lint(cfg, engines=("all", "speculators"), from_format=producer)) == []


# -- convert --to speculators without a verifier ----------------------------------------------------------------

def test_convert_to_speculators_without_verifier_exits_1_and_writes_nothing(drafter, tmp_path):
    src = drafter(producer="specforge")
    result = subprocess.run([sys.executable, "-m", "eagleconv", "convert", str(src), str(tmp_path / "out"),
                             "--to", "speculators"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--verifier ORG/NAME" in lines[0] and "--allow-no-verifier" in lines[0], lines
    assert "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == [src.name]  # no output, no staging directory


def test_allow_no_verifier_writes_it_with_the_ec043_warning(drafter, tmp_path):
    src = drafter(producer="specforge")
    result = run("convert", str(src), str(tmp_path / "out"), "--to", "speculators", "--allow-no-verifier", "--json")
    assert result.exit_code == 0, result.output
    assert [f["code"] for f in json.loads(result.output)["findings"]] == ["EC043"]
    assert read_json(tmp_path / "out" / "config.json")["speculators_config"]["verifier"]["name_or_path"] is None
    # and the reason it is refused by default: speculators' loader cannot load it
    assert run("validate", str(tmp_path / "out"), "--engine", "speculators", "--no-numeric").exit_code == 1


def test_a_source_that_names_its_verifier_needs_no_flag(drafter, tmp_path):
    result = run("convert", str(drafter(producer="speculators")), str(tmp_path / "out"), "--to", "speculators")
    assert result.exit_code == 0, result.output


def test_other_layouts_need_no_verifier(drafter, tmp_path):
    assert run("convert", str(drafter(producer="specforge")), str(tmp_path / "out"), "--to", "vllm").exit_code == 0


@pytest.mark.parametrize("command,recipe,extra", [
    ("upgrade", DrafterRecipe(producer="vllm"), []),
    ("downgrade", DrafterRecipe(producer="vllm", eagle31=True), ["--allow-lossy"]),
])
def test_upgrade_and_downgrade_to_speculators_need_a_verifier(tmp_path, command, recipe, extra):
    src = make_drafter(tmp_path / "src", recipe)
    refused = run(command, str(src), str(tmp_path / "out"), "--to", "speculators", *extra)
    assert refused.exit_code == 1 and "--verifier ORG/NAME" in refused.output, refused.output
    assert not (tmp_path / "out").exists()
    allowed = run(command, str(src), str(tmp_path / "out"), "--to", "speculators", "--allow-no-verifier", *extra)
    assert allowed.exit_code == 0, allowed.output


# -- findings CODE ------------------------------------------------------------------------------------------------

def _reference_sections() -> dict[str, str]:
    text = REFERENCE_PATH.read_text().split("\n# Engine profiles")[0]
    return {part.split(":")[0]: "## " + part.rstrip() + "\n" for part in text.split("\n## ")[1:]}


def test_findings_code_prints_only_those_entries():
    sections = _reference_sections()
    result = run("findings", "ec012")
    assert result.exit_code == 0, result.output
    assert result.output == sections["EC012"]
    both = run("findings", "EC043", "EC006")
    assert both.exit_code == 0 and both.output == sections["EC043"] + "\n" + sections["EC006"]


def test_findings_code_json():
    result = run("findings", "EC012", "EC006", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [r["code"] for r in rows] == ["EC012", "EC006"]
    assert rows[0]["title"] in _reference_sections()["EC012"]


def test_findings_unknown_code_is_a_usage_error():
    result = run("findings", "EC999")
    assert result.exit_code == 2 and "EC999" in result.output and "EC012" in result.output


# -- --hide-info ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["validate", "lint"])
def test_hide_info_hides_infos_from_the_table_not_from_json(command):
    path = FIXTURES / "vllm-qwen3-eagle31"
    target = str(path) if command == "validate" else str(path / "config.json")
    full = ValidationReport.model_validate_json(run(command, target, "--engine", "all", "--json", "--hide-info").output)
    infos = [f for f in full.findings if f.severity == "info"]
    assert infos  # EC062 norm statistics (validate), trtllm's EC010/EC011 (both)
    shown = run(command, target, "--engine", "all", "--hide-info")
    assert shown.exit_code == 0
    assert not any(f.code in shown.output for f in infos if f.code not in {g.code for g in full.findings
                                                                             if g.severity != "info"})
    assert f"{len(infos)} info(s) hidden" in shown.output
    assert all(f.code in run(command, target, "--engine", "all").output for f in infos)


# -- lint and validate -------------------------------------------------------------------------------------------

def _verdicts(report: ValidationReport) -> set[tuple[str, str | None, str]]:
    return {(f.code, f.engine, f.severity) for f in report.findings if f.severity != "info"}


def test_lint_explains_the_verdicts_that_depend_on_the_layout_it_guessed():
    path = FIXTURES / "specforge-llama-eagle31"
    checked = validate(path, engines="all", numeric=False)
    linted = lint(path / "config.json", engines="all")
    assert linted.format == "vllm" and checked.format == "specforge"
    only_lint = _verdicts(linted) - _verdicts(checked)
    only_validate = _verdicts(checked) - _verdicts(linted)
    assert ("EC012", "sglang post-32334", "error") in only_lint and only_validate  # the disagreement
    for f in linted.findings:
        if (f.code, f.engine, f.severity) in only_lint:
            assert "--from specforge" in f.message and "tensor names" in f.message, f.message
    [summary] = [f for f in linted.findings if f.severity == "info" and "--from specforge" in f.message]
    for code, engine, severity in only_validate:
        assert f"{severity} {code}" + (f" ({engine})" if engine else "") in summary.message
    # --from fixes the layout: then lint and validate agree
    assert _verdicts(lint(path / "config.json", engines="all", from_format="specforge")) == _verdicts(checked)


def test_lint_of_a_config_with_a_layout_marker_has_nothing_to_explain():
    linted = lint(FIXTURES / "torchspec-kimi-mla-eagle31" / "config.json", engines="all")
    assert linted.format == "torchspec"
    assert not any("tensor names" in f.message for f in linted.findings)
