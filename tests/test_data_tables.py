"""Defect 6: data tables are built by keyword, so a field can never land in its neighbour's slot."""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil

from click.testing import CliRunner

import eagleconv.engines
from eagleconv.cli.main import cli
from eagleconv.synthetic import KIMI_LATENT


def _engine_dataclasses():
    for info in pkgutil.iter_modules(eagleconv.engines.__path__):
        module = importlib.import_module(f"eagleconv.engines.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__:
                yield obj


def test_engine_tables_are_keyword_only_after_their_first_field():
    seen = list(_engine_dataclasses())
    assert {c.__name__ for c in seen} >= {"DrafterClass", "FlagRule", "KeyRules", "CaptureRules", "EngineProfile"}
    for cls in seen:
        fields = dataclasses.fields(cls)
        positional = [f.name for f in fields[1:] if not f.kw_only]
        assert not positional, f"{cls.__name__}: {positional} can be passed positionally"


def test_vllm_52a31cc_validates_mla_drafter_without_aux_count(drafter, tmp_path):
    """The MLA class that ignores unknown keys used to receive its ignored-flags table as its aux count."""
    src = drafter(producer="torchspec", architecture="deepseek_mla", eagle31=True, dims=KIMI_LATENT)  # a width vLLM runs
    out = tmp_path / "kimi-eagle3"
    assert CliRunner().invoke(cli, ["convert", str(src), str(out), "--to", "vllm"]).exit_code == 0
    cfg = json.loads((out / "config.json").read_text())
    for key in ("num_aux_hidden_states", "eagle_aux_hidden_state_layer_ids"):
        cfg.pop(key, None)
    cfg.get("eagle_config", {}).pop("eagle_aux_hidden_state_layer_ids", None)
    (out / "config.json").write_text(json.dumps(cfg))
    result = CliRunner().invoke(cli, ["validate", str(out), "--engine", "vllm:52a31cc", "--no-numeric", "--json"])
    assert "internal error" not in result.output, result.output
    report = json.loads(result.output)
    assert result.exit_code == 0, result.output
    assert report["engines"] == ["vllm 52a31cc"]
    assert [f["code"] for f in report["findings"] if f["severity"] != "info"] == ["EC010"]
