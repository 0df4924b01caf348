"""The streamed numeric scan, header-only validation, the CLI and the findings reference."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

import eagleconv
from eagleconv.cli.main import cli
from eagleconv.io.state_dict import StateDictTensors
from eagleconv.spec.report import ValidationReport
from eagleconv.synthetic import DrafterRecipe, TinyDims, canonical_tensors, producer_config
from eagleconv.validation.api import check
from eagleconv.validation.reference import REFERENCE_PATH, render_findings

SERVABLE = TinyDims(target_hidden=32)


class RecordingStore(StateDictTensors):
    """A real in-memory store that records what validation reads."""

    def __init__(self, state):
        super().__init__(state)
        self.whole, self.chunks = [], []

    def read_raw(self, name):
        self.whole.append(name)
        return super().read_raw(name)

    def iter_raw_chunks(self, name, chunk_bytes=1 << 26):
        for chunk in super().iter_raw_chunks(name, chunk_bytes):
            self.chunks.append((name, chunk.nbytes))
            yield chunk


def _run(store, cfg, numeric, chunk_bytes=256):
    return check(cfg, store, path=None, layout_name=None, engines=("vllm",), target=None, tp=None,
                 numeric=numeric, chunk_bytes=chunk_bytes)


def test_nan_scan_streams_in_chunks():
    import torch
    t = canonical_tensors(DrafterRecipe(producer="vllm", dims=SERVABLE))
    flat = t["lm_head.weight"].reshape(-1)  # 64 x 32 bf16 = 4 KiB: 16 chunks of 256 bytes
    flat[5] = float("nan")
    flat[1500] = float("inf")
    store = RecordingStore(t)
    report = _run(store, producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE)), numeric=True)
    [f] = [f for f in report.findings if f.code == "EC060"]
    assert f.severity == "error" and "2 NaN/Inf" in f.message and "index 5" in f.message
    assert f.tensor == "lm_head.weight"  # the scan located the tensor, not just the count
    assert all(n <= 256 for _, n in store.chunks)
    assert sum(1 for name, _ in store.chunks if name == "lm_head.weight") == 16
    assert any(f.code == "EC062" for f in report.findings)
    assert not report.ok
    # negative control: the same tensors with the two values made finite again scan clean
    flat[5], flat[1500] = 0.0, 0.0
    assert torch.isfinite(flat).all()
    clean = _run(RecordingStore(t), producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE)), numeric=True)
    assert clean.ok and "EC060" not in {f.code for f in clean.findings}


def test_on_disk_scan_never_reads_a_weight_whole(tmp_path):
    from safetensors.torch import save_file

    from eagleconv.io.checkpoint import Checkpoint
    from eagleconv.io.reader import open_checkpoint

    t = canonical_tensors(DrafterRecipe(producer="vllm", dims=SERVABLE))
    t["fc.weight"].reshape(-1)[3000] = float("nan")
    (tmp_path / "config.json").write_text(json.dumps(producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE))))
    save_file({k: v.contiguous() for k, v in t.items()}, str(tmp_path / "model.safetensors"))
    store = open_checkpoint(tmp_path)
    seen = {"whole": [], "chunks": []}

    class Recording(Checkpoint):
        def read_raw(self, name):
            seen["whole"].append(name)
            return super().read_raw(name)

        def iter_raw_chunks(self, name, chunk_bytes=1 << 26):
            for chunk in super().iter_raw_chunks(name, chunk_bytes):
                seen["chunks"].append(chunk.nbytes)
                yield chunk

    store.__class__ = Recording
    report = check(store.config, store, path=str(tmp_path), layout_name=None, engines=("vllm",), target=None,
                   tp=None, numeric=True, chunk_bytes=512)
    store.close()
    [f] = [f for f in report.findings if f.code == "EC060"]
    assert f.tensor == "fc.weight" and "1 NaN/Inf" in f.message and "index 3000" in f.message
    assert max(seen["chunks"]) <= 512
    assert sum(seen["chunks"]) >= t["fc.weight"].numel() * 2  # fc.weight was streamed through, in chunks
    assert not {"fc.weight", "lm_head.weight", "embed_tokens.weight"} & set(seen["whole"])


def test_zero_fc_warning():
    import torch
    t = canonical_tensors(DrafterRecipe(producer="vllm", dims=SERVABLE))
    t["fc.weight"] = torch.zeros_like(t["fc.weight"])
    report = _run(StateDictTensors(t), producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE)), numeric=True)
    assert any(f.code == "EC061" and f.tensor == "fc.weight" and f.severity == "warning" for f in report.findings)
    clean = _run(StateDictTensors(canonical_tensors(DrafterRecipe(producer="vllm", dims=SERVABLE))),
                 producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE)), numeric=True)
    assert not {"EC060", "EC061"} & {f.code for f in clean.findings}


def test_header_only_reads_small_vectors_only():
    store = RecordingStore(canonical_tensors(DrafterRecipe(producer="vllm", dims=SERVABLE)))
    report = _run(store, producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE)), numeric=False)
    assert report.ok and not report.numeric_scan
    assert set(store.whole) <= {"d2t", "t2d"} and not store.chunks


def test_cli_validate_json_and_exit_codes(drafter, tmp_path):
    runner = CliRunner()
    good = drafter(producer="vllm", dims=SERVABLE)
    result = runner.invoke(cli, ["validate", str(good), "--json"])
    assert result.exit_code == 0, result.output
    report = ValidationReport.model_validate_json(result.output)
    assert report.ok and report.format == "vllm" and report.architecture == "llama"
    data = json.loads(result.output)
    assert set(data["flags"]) >= {"fc_norm", "norm_before_fc", "norm_output", "norm_before_residual"}
    assert all(set(f) == {"code", "severity", "message", "tensor", "engine", "effect", "runner"} for f in data["findings"])
    bad = drafter(producer="automodel", dims=SERVABLE)
    assert runner.invoke(cli, ["validate", str(bad), "--no-numeric", "--engine", "all"]).exit_code == 1
    assert runner.invoke(cli, ["validate", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(cli, ["validate", str(good), "--engine", "nope"]).exit_code == 2
    text = runner.invoke(cli, ["validate", str(good), "--tp", "3"])
    assert text.exit_code == 1 and "EC051" in text.output


def test_cli_lint(drafter, tmp_path):
    runner = CliRunner()
    config = drafter(producer="vllm", dims=SERVABLE) / "config.json"
    assert runner.invoke(cli, ["lint", str(config)]).exit_code == 0
    dup = tmp_path / "dup.json"
    dup.write_text('{"hidden_size": 1, "hidden_size": 2}')
    result = runner.invoke(cli, ["lint", str(dup), "--json"])
    assert result.exit_code == 1 and ValidationReport.model_validate_json(result.output).findings[0].code == "EC001"


def test_findings_reference_is_current():
    assert REFERENCE_PATH.read_text() == render_findings(), "run: eagleconv findings > eagleconv/validation/FINDINGS.md"
    result = CliRunner().invoke(cli, ["findings"])
    assert result.output == render_findings()
    from eagleconv.validation.codes import CODES
    for code in CODES:
        assert f"## {code}:" in result.output


def test_validate_and_lint_never_import_torch(drafter):
    """A training environment's torch is never touched: the numeric scan and lint run on numpy alone."""
    path = drafter(producer="vllm", dims=SERVABLE, eagle31=True)
    code = ("import sys; from click.testing import CliRunner; from eagleconv.cli.main import cli; "
            f"r = CliRunner().invoke(cli, ['validate', {str(path)!r}, '--engine', 'all', '--json']); "
            "assert r.exit_code == 0, r.output; assert '\"numeric_scan\": true' in r.output; "
            f"r = CliRunner().invoke(cli, ['lint', {str(path / 'config.json')!r}]); assert r.exit_code == 0, r.output; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_library_export():
    assert eagleconv.validate is eagleconv.validation.validate


def test_numeric_scan_reports_progress_over_every_float_byte(drafter):
    import eagleconv
    from eagleconv.readers.loading import load_drafter

    path = drafter(producer="vllm", dims=SERVABLE)
    totals, seen = [], []
    eagleconv.validate(path, progress=(totals.append, seen.append), chunk_bytes=512)
    loaded = load_drafter(path)
    floats = sum(i.nbytes for i in loaded.store.tensors.values() if i.dtype in ("BF16", "F16", "F32", "F64"))
    loaded.close()
    assert totals == [floats] and sum(seen) == floats and max(seen) <= 512
