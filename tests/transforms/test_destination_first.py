"""Every destination refusal comes before calibration, measurement and plan: a refused destination costs no
measurement (upgrade, downgrade, convert), and a dry run still plans."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import eagleconv
from eagleconv.errors import DestinationError, UsageError

ROOT = Path(__file__).resolve().parents[2]
PAIR = ROOT / "fixtures" / "tiny-pair"
TARGET, PROMPTS, EAGLE3, EAGLE31 = PAIR / "target", PAIR / "prompts.json", PAIR / "eagle3", PAIR / "eagle31"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, env=ENV,
                          timeout=600, **kwargs)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def existing(tmp_path) -> Path:
    """A previous output at DST: a real drafter checkpoint (what --overwrite may replace)."""
    dst = tmp_path / "dst"
    shutil.copytree(EAGLE3, dst)
    return dst


def test_upgrade_with_target_and_prompts_into_an_existing_dst_runs_no_measurement(existing):
    """The issue: 44 s of divergence measurement, then 'destination already exists'.  ``progress`` is told every
    step of the measurement; it must never be called, and DST is untouched."""
    before = snapshot(existing)
    calls: list[tuple[str, int, int]] = []
    with pytest.raises(UsageError, match="destination already exists"):
        eagleconv.upgrade(EAGLE3, existing, target=TARGET, prompts=PROMPTS,
                          progress=lambda what, done, total: calls.append((what, done, total)))
    assert calls == []
    assert snapshot(existing) == before


def test_downgrade_lossy_with_target_into_an_existing_dst_runs_no_measurement(existing):
    calls: list[str] = []
    with pytest.raises(UsageError, match="destination already exists"):
        eagleconv.downgrade(EAGLE31, existing, allow_lossy=True, target=TARGET, prompts=PROMPTS,
                            progress=lambda what, done, total: calls.append(what))
    assert calls == []


def test_overwrite_of_a_non_checkpoint_is_refused_before_the_measurement(tmp_path):
    dst = tmp_path / "notes"
    dst.mkdir()
    (dst / "thesis.tex").write_text("mine")
    calls: list[str] = []
    with pytest.raises(UsageError, match="not a checkpoint directory"):
        eagleconv.upgrade(EAGLE3, dst, target=TARGET, prompts=PROMPTS, overwrite=True,
                          progress=lambda what, done, total: calls.append(what))
    assert calls == [] and snapshot(dst) == {"thesis.tex": b"mine"}


def test_overwrite_of_the_current_directory_is_refused_busy_before_the_measurement(existing, monkeypatch):
    monkeypatch.chdir(existing)
    calls: list[str] = []
    with pytest.raises(DestinationError, match="current directory"):
        eagleconv.upgrade(EAGLE3, existing, target=TARGET, prompts=PROMPTS, overwrite=True,
                          progress=lambda what, done, total: calls.append(what))
    assert calls == []


def test_a_dst_inside_the_source_is_refused_before_the_measurement(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(EAGLE3, src)
    calls: list[str] = []
    with pytest.raises(UsageError, match="inside the source"):
        eagleconv.upgrade(src, src / "out", target=TARGET, prompts=PROMPTS,
                          progress=lambda what, done, total: calls.append(what))
    assert calls == [] and not (src / "out").exists()


def test_cli_upgrade_into_an_existing_dst_reads_no_calibration(existing, tmp_path):
    """Ordering shown without a hook: --calibration names a file that is not there.  Read first (the old
    order), that is the error; checked first, the destination is."""
    result = cli("upgrade", str(EAGLE3), str(existing), "--calibration", str(tmp_path / "absent.safetensors"))
    assert result.returncode == 2, result.stderr
    assert "destination already exists" in result.stderr and "absent.safetensors" not in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_cli_upgrade_with_target_prompts_into_an_existing_dst_loads_no_target(existing, tmp_path):
    """--target names a directory that holds no model: capturing would fail on it; the destination goes first."""
    result = cli("upgrade", str(EAGLE3), str(existing), "--target", str(tmp_path / "no-model"),
                 "--prompts", str(PROMPTS), "--json")
    assert result.returncode == 2, result.stderr
    assert "destination already exists" in result.stderr and "no-model" not in result.stderr


def test_convert_into_an_existing_dst_is_refused_before_the_transform_and_the_plan(existing):
    """convert's own ``transform`` hook (upgrade's measurement lives there) is never called."""
    called: list[str] = []

    def transform(loaded):
        called.append("transform")
        raise AssertionError("the transform ran before the destination was checked")

    with pytest.raises(UsageError, match="destination already exists"):
        eagleconv.convert(EAGLE3, existing, "speculators", transform=transform)
    assert called == []


def test_dry_run_still_plans_without_judging_the_destination(existing):
    """A dry run writes nothing, so an existing DST does not stop it (unchanged behaviour)."""
    report = eagleconv.convert(EAGLE3, existing, None, dry_run=True)
    assert report.dry_run and report.plan
