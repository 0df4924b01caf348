"""push / pull / hf:// against a real HTTP Hub on 127.0.0.1 (tests/support/fake_hub.py), through the real huggingface_hub.

Only these tests turn huggingface_hub's offline mode off, and only while a
loopback server is up; conftest still refuses every non-loopback connection.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagleconv.hub import PullReport, is_local_path, publish_findings
from tests.conftest import edit_config, read_json
from tests.support.fake_hub import TOKEN
from tests.support.hub import good, hub, push_json, run  # noqa: F401 - the loopback Hub fixture

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def go_offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# -- refusal: no request at all ---------------------------------------------------------------

def test_push_refuses_an_error_finding_before_any_request(hub, drafter):
    bad = good(drafter)
    edit_config(bad, norm_before_fc=True)  # with fc_norm: EC020, mutually exclusive flags
    code, report = push_json(bad, "org/bad", "--endpoint", hub.url)
    assert code == 1 and report.refused and not report.ok
    assert any(f.code == "EC020" and f.severity == "error" for f in report.validation.findings)
    assert hub.requests == []
    assert report.files == [] and report.staged is None


def test_push_strict_refuses_warnings_unless_ignored(hub, drafter, tmp_path):
    src = good(drafter)
    cfg = read_json(src / "config.json")
    cfg["speculators_config"]["verifier"]["name_or_path"] = "/proving-grounds/ckpt/llama-8b"
    (src / "config.json").write_text(json.dumps(cfg))
    code, report = push_json(src, "org/leaky", "--strict")
    assert code == 1 and report.refused
    assert [f.code for f in report.publish_findings] == ["EC080"]
    assert hub.requests == []
    # The user judges the leak acceptable: listed as ignored, the push goes through, the card has no base_model.
    code, report = push_json(src, "org/leaky", "--strict", "--ignore", "EC080")
    assert code == 0 and report.ok, report.error
    assert [f.code for f in report.validation.ignored] == ["EC080"]
    card = hub.files("org/leaky")["README.md"].decode()
    assert "base_model" not in card.split("---")[1] and "/proving-grounds" not in card.split("## Validation")[0]
    assert "vllm serve TARGET_MODEL" in card


# -- a successful push -------------------------------------------------------------------------

def test_push_lands_every_file_once_and_verifies(hub, drafter):
    src = good(drafter)
    (src / "optimizer.pt").write_bytes(b"not for publication")
    code, report = push_json(src, "org/drafter", "--endpoint", hub.url)
    assert code == 0 and report.ok and report.error is None, report.error
    assert hub.commit_posts() == 1
    repo = hub.repos["org/drafter"]
    assert len(repo.commits) == 2  # the Hub's initial .gitattributes commit + ours
    remote = hub.files("org/drafter")
    manifest = json.loads(remote["MANIFEST.json"])
    assert sorted(remote) == sorted([".gitattributes", "MANIFEST.json", *(e["path"] for e in manifest["files"])])
    assert sorted(e["path"] for e in manifest["files"]) == ["README.md", "config.json", "model.safetensors"]
    for name in ("config.json", "model.safetensors"):
        assert remote[name] == (src / name).read_bytes()  # byte for byte
    import hashlib

    for entry in manifest["files"]:
        assert hashlib.sha256(remote[entry["path"]]).hexdigest() == entry["sha256"]
        assert len(remote[entry["path"]]) == entry["size"]
    assert "optimizer.pt" not in remote and report.not_published == ["optimizer.pt"]
    assert report.parent_commit is not None and report.commit_oid == repo.refs["main"]
    assert {f.path for f in report.remote} == set(remote) and report.mismatches == []
    card = remote["README.md"].decode()
    import yaml

    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert front["license"] == "unknown" and front["library_name"] == "vllm"
    assert {"eagle3", "eagle3.1", "speculative-decoding"} <= set(front["tags"])
    assert ("vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "
            '\'{"model": "org/drafter", "method": "eagle3", "num_speculative_tokens": 3}\'') in card
    assert "vllm 0.32" in card and "hidden_state_index" in card
    spec = read_json(src / "config.json")["transformer_layer_config"]
    assert f"| rope | theta {spec['rope_theta']}, scaling none |" in card
    assert f"| rms_norm_eps | {spec['rms_norm_eps']} |" in card
    # EC041 judges the name vLLM will see, the repo id ("drafter": no 'eagle3'), not the local directory.
    ec041 = [f.message for f in report.validation.findings if f.code == "EC041"]
    assert ec041 and all("neither 'eagle-' nor 'eagle3'" in m for m in ec041)
    code, named = push_json(src, "org/llama-eagle3-drafter", "--dry-run")
    assert not any(f.code == "EC041" for f in named.validation.findings)
    code, named = push_json(src, "org/my-eagle-3.1-drafter", "--dry-run")
    assert [f.severity for f in named.validation.findings if f.code == "EC041"] == ["warning"]
    assert not (src / "README.md").exists() and not (src / "MANIFEST.json").exists()  # never writes where it reads


def test_push_replaces_stale_shards_in_the_same_commit(hub, drafter, tmp_path):
    from eagleconv.conversion import convert

    src = good(drafter)
    sharded = tmp_path / "sharded"
    convert(src, sharded, "speculators", max_shard_size=20_000)
    assert len(list(sharded.glob("*.safetensors"))) > 1
    assert push_json(sharded, "org/d")[0] == 0
    code, report = push_json(src, "org/d")
    assert code == 0 and report.ok, report.error
    remote = hub.files("org/d")
    assert not any(n.startswith("model-") or n.endswith(".index.json") for n in remote)
    assert report.deleted and all(n.startswith("model-") or n.endswith(".index.json") for n in report.deleted)
    assert hub.commit_posts() == 2


def test_push_to_a_new_branch_and_as_a_pull_request(hub, drafter):
    src = good(drafter)
    code, report = push_json(src, "org/d", "--revision", "staging")
    assert code == 0 and report.ok, report.error
    repo = hub.repos["org/d"]
    assert "config.json" in hub.files("org/d", "staging") and "config.json" not in hub.files("org/d", "main")
    code, report = push_json(src, "org/d", "--create-pr")
    assert code == 0 and report.ok, report.error
    assert report.pr_url and report.pr_url.endswith("/discussions/1")
    assert "config.json" in hub.files("org/d", "refs/pr/1") and "config.json" not in hub.files("org/d", "main")
    assert repo.refs["refs/pr/1"] == report.commit_oid


def test_push_with_a_wrong_token_is_one_line_and_commits_nothing(hub, drafter, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    result = run("push", good(drafter), "org/d")
    assert result.exit_code == 2
    assert "nothing was uploaded" in result.output and "Traceback" not in result.output
    assert hub.commit_posts() == 0 and "org/d" not in hub.repos


# -- failures during the commit ----------------------------------------------------------------

def test_commit_failure_is_reported_with_the_remote_and_not_retried(hub, drafter):
    src = good(drafter)
    hub.fail = "commit-500"
    code, report = push_json(src, "org/d")
    assert code == 2 and not report.ok
    assert "commit failed" in report.error and "500" in report.error
    assert hub.commit_posts() == 1  # never retried
    assert len(hub.repos["org/d"].commits) == 1  # consistent: only the initial commit
    assert [f.path for f in report.remote] == [".gitattributes"]
    assert any("no commit landed" in n and report.parent_commit in n for n in report.notes)
    # A later push (the failure cleared) starts from the same parent and lands.
    hub.fail = None
    code, report = push_json(src, "org/d")
    assert code == 0 and report.ok and hub.commit_posts() == 2


def test_commit_whose_answer_is_lost_is_reconciled_not_retried(hub, drafter):
    hub.fail = "commit-lost"
    code, report = push_json(good(drafter), "org/d")
    assert hub.commit_posts() == 1
    assert code == 0 and report.ok, report
    assert report.commit_oid == hub.repos["org/d"].refs["main"]
    assert any("response was lost" in n for n in report.notes)


def test_commit_on_a_moved_branch_is_refused_by_parent_commit_and_reported(hub, drafter):
    hub.fail = "commit-race"
    code, report = push_json(good(drafter), "org/d")
    assert code == 2 and not report.ok and "412" in report.error
    assert hub.commit_posts() == 1
    head = hub.repos["org/d"].refs["main"]
    assert head != report.parent_commit and sorted(hub.files("org/d")) == [".gitattributes", "other.txt"]
    assert any("moved from" in n and head in n for n in report.notes)
    assert {f.path for f in report.remote} == {".gitattributes", "other.txt"}


def test_private_repository_needs_the_token_to_pull(hub, drafter, tmp_path, monkeypatch):
    assert run("push", good(drafter), "org/secret", "--private").exit_code == 0
    assert hub.repos["org/secret"].private
    monkeypatch.delenv("HF_TOKEN")
    result = run("pull", "org/secret", tmp_path / "x")
    assert result.exit_code == 2 and "hf://org/secret" in result.output and not (tmp_path / "x").exists()


def test_pull_refuses_error_findings_unless_forced(hub, drafter, tmp_path):
    from tests.support.fake_hub import Repo

    bad = good(drafter)
    edit_config(bad, norm_before_fc=True)
    repo = Repo(private=False)
    repo.refs["main"] = hub.new_commit(repo, {p.name: p.read_bytes() for p in bad.iterdir()}, None)
    hub.repos["org/bad"] = repo
    result = run("pull", "hf://org/bad", tmp_path / "bad", "--json")
    report = PullReport.model_validate_json(result.stdout)
    assert result.exit_code == 1 and report.destination is None and report.manifest_verified is None
    assert any(f.code == "EC020" for f in report.validation.findings) and not (tmp_path / "bad").exists()
    result = run("pull", "hf://org/bad", tmp_path / "bad", "--force")
    assert result.exit_code == 0 and (tmp_path / "bad" / "model.safetensors").read_bytes() == \
        (bad / "model.safetensors").read_bytes()


def test_a_source_rewritten_during_staging_is_refused(hub, drafter):
    """A trainer still writing the directory: what was validated is not what would be sent."""
    import os

    import eagleconv
    from eagleconv.errors import UsageError

    src = good(drafter)

    def on_bytes(n: int) -> None:  # the hashing pass runs after the copy: a writer touches the source meanwhile
        os.utime(src / "model.safetensors", ns=(1, 1))

    with pytest.raises(UsageError, match="model.safetensors changed while push validated"):
        eagleconv.push(src, "org/d", progress=(None, on_bytes))
    assert hub.requests == []


# -- dry run ------------------------------------------------------------------------------------

def test_dry_run_stages_card_and_manifest_without_the_network(hub, drafter, tmp_path):
    import tempfile

    src = good(drafter)
    stage = tmp_path / "stage"
    result = run("push", src, "org/d", "--endpoint", hub.url, "--dry-run", "--stage-dir", stage)
    assert result.exit_code == 0, result.output
    assert hub.requests == []
    assert "would upload" in result.output and "model.safetensors" in result.output
    assert sorted(p.name for p in stage.iterdir()) == ["MANIFEST.json", "README.md", "config.json", "model.safetensors"]
    from eagleconv.hub import verify_manifest

    assert verify_manifest(stage) == (True, [])
    # Without --stage-dir the dry run keeps a temporary staging copy and says where.
    code, report = push_json(src, "org/d", "--dry-run")
    assert code == 0 and report.staged and (Path(report.staged) / "README.md").read_text() == report.model_card
    assert Path(report.staged).parent == Path(tempfile.gettempdir()) and Path(report.staged).name.startswith(
        "eagleconv-push-")


# -- pull and hf:// -----------------------------------------------------------------------------

def test_pull_round_trips_byte_identical(hub, drafter, tmp_path):
    src = good(drafter)
    stage = tmp_path / "stage"
    assert run("push", src, "org/d", "--stage-dir", stage).exit_code == 0
    dest = tmp_path / "pulled"
    result = run("pull", "org/d", dest, "--json")
    assert result.exit_code == 0, result.output
    report = PullReport.model_validate_json(result.stdout)
    assert report.manifest_verified is True and report.validation.ok
    for name in ("config.json", "model.safetensors", "README.md", "MANIFEST.json"):
        assert (dest / name).read_bytes() == (stage / name).read_bytes()
    assert (dest / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert not (dest / "model.safetensors").is_symlink()
    import os

    assert Path(report.snapshot).is_relative_to(os.environ["HF_HUB_CACHE"])  # this test's cache, via HF's layout
    # The same repository as a PATH, pinned to the commit.
    commit = hub.repos["org/d"].refs["main"]
    result = run("inspect", f"hf://org/d@{commit}", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["format"] == "speculators"
    assert run("validate", "hf://org/d", "--no-numeric").exit_code == 0
    out = tmp_path / "as-vllm"
    assert run("convert", "hf://org/d", out, "--to", "vllm", "--download").exit_code == 0  # it needs the weights
    assert (out / "config.json").exists()


def test_pull_never_replaces_a_directory_that_appears_while_it_copies(hub, drafter, tmp_path, monkeypatch):
    """DEST created (empty) after the up-front check: rename(2) would replace it; pull refuses and cleans up."""
    import shutil

    assert run("push", good(drafter), "org/d").exit_code == 0
    dest = tmp_path / "pulled"
    real = shutil.copyfile

    def copy_then_race(src, dst, *a, **k):
        dest.mkdir(exist_ok=True)  # another process takes DEST meanwhile
        return real(src, dst, *a, **k)

    monkeypatch.setattr(shutil, "copyfile", copy_then_race)
    result = run("pull", "org/d", dest)
    assert result.exit_code == 2 and "destination appeared while writing" in result.output, result.output
    assert dest.is_dir() and list(dest.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".pulled.")) == []


def test_pull_refuses_a_repository_that_does_not_match_its_manifest(hub, drafter, tmp_path):
    assert run("push", good(drafter), "org/d").exit_code == 0
    repo = hub.repos["org/d"]
    files = dict(hub.files("org/d"))
    blob = bytearray(files["model.safetensors"])
    blob[-1] ^= 0xFF  # same size, other bytes
    files["model.safetensors"] = bytes(blob)
    repo.refs["main"] = hub.new_commit(repo, files, repo.refs["main"])
    dest = tmp_path / "pulled"
    result = run("pull", "org/d", dest)
    assert result.exit_code == 2
    assert "model.safetensors does not match MANIFEST.json: sha256" in result.output
    assert not dest.exists() and not list(tmp_path.glob(".pulled*"))
    assert run("validate", "hf://org/d", "--download").exit_code == 2  # the snapshot is checked against its manifest


def test_hub_ids_honour_offline_mode(hub, drafter, tmp_path, monkeypatch):
    assert run("push", good(drafter), "org/d").exit_code == 0
    assert run("pull", "org/d", tmp_path / "first").exit_code == 0  # fills the cache
    go_offline(monkeypatch)
    before = len(hub.requests)
    assert run("validate", "hf://org/d", "--no-numeric").exit_code == 0  # from the cache
    result = run("validate", "hf://org/never-pushed")
    assert result.exit_code == 2 and "HF_HUB_OFFLINE" in result.output
    result = run("push", good(drafter), "org/d")
    assert result.exit_code == 2 and "HF_HUB_OFFLINE" in result.output
    assert len(hub.requests) == before


def test_a_missing_local_path_is_never_a_hub_id(hub):
    result = run("inspect", "org/d")
    assert result.exit_code == 2
    assert "no such file or directory" in result.output and "hf://org/d" in result.output
    assert hub.requests == []


# -- --ignore and EC080 without a Hub ----------------------------------------------------------

def test_ignore_lets_strict_pass_on_a_judged_warning_and_lists_it():
    path = FIXTURES / "specforge-llama-eagle31"
    strict = run("validate", path, "--strict", "--json")
    warnings = {f["code"] for f in json.loads(strict.output)["findings"] if f["severity"] == "warning"}
    assert strict.exit_code == 1 and "EC023" in warnings
    args = [a for code in sorted(warnings) for a in ("--ignore", code)]
    result = run("validate", path, "--strict", "--json", *args)
    report = json.loads(result.output)
    assert result.exit_code == 0
    assert {f["code"] for f in report["ignored"]} == warnings
    assert not any(f["code"] in warnings for f in report["findings"])
    lint = run("lint", path / "config.json", "--strict", "--json", *args)
    assert lint.exit_code == 0 and {f["code"] for f in json.loads(lint.output)["ignored"]} <= warnings
    assert "ignored (--ignore)" in run("validate", path, *args).output


def test_ignore_never_hides_an_error_and_rejects_unknown_codes(drafter):
    bad = good(drafter)
    edit_config(bad, norm_before_fc=True)
    result = run("validate", bad, "--ignore", "EC020", "--json")
    assert result.exit_code == 1
    assert any(f["code"] == "EC020" for f in json.loads(result.output)["findings"])
    result = run("validate", bad, "--ignore", "EC999")
    assert result.exit_code == 2 and "EC999" in result.output


@pytest.mark.parametrize("name,local", [
    ("/proving-grounds/llama-8b", True), ("~/models/llama", True), ("/model/from_s3", True),
    ("./out/target", True), ("C:\\models\\llama", True), ("models/llama/8b", True),
    ("meta-llama/Llama-3.1-8B-Instruct", False), ("gpt2", False),
])
def test_local_path_verifiers_are_ec070(name, local):
    assert is_local_path(name) is local
    config = {"speculators_config": {"verifier": {"name_or_path": name}}}
    assert [f.code for f in publish_findings(config, None)] == (["EC080"] if local else [])
    nested = {"eagle_config": {"target_model": name}, "base_model_name_or_path": name}
    assert [f.code for f in publish_findings(nested, None)] == (["EC080", "EC080"] if local else [])


@pytest.mark.parametrize("text", ["hf://org/x@", "hf://x", "hf://../x", "hf://a/b/c", "hf://org/x y"])
def test_malformed_hf_urls_are_usage_errors_without_requests(hub, text):
    result = run("validate", text)
    assert result.exit_code == 2 and "hf://ORG/NAME" in result.output
    assert hub.requests == []


def test_pull_never_writes_over_an_existing_directory(hub, drafter, tmp_path):
    dest = tmp_path / "exists"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    result = run("pull", "org/d", dest)
    assert result.exit_code == 2 and "destination already exists (pass --overwrite" in result.output
    assert [p.name for p in dest.iterdir()] == ["keep.txt"] and hub.requests == []
    result = run("pull", "org/d", dest, "--overwrite")  # --overwrite replaces only a checkpoint
    assert result.exit_code == 2 and "not a checkpoint directory" in result.output
    assert [p.name for p in dest.iterdir()] == ["keep.txt"] and hub.requests == []


def test_library_push_and_pull_with_an_explicit_token_and_endpoint(hub, drafter, tmp_path, monkeypatch):
    import eagleconv

    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.delenv("HF_ENDPOINT")
    src = good(drafter)
    report = eagleconv.push(src, "org/lib", endpoint=hub.url, token=TOKEN, create_pr=True, commit_message="from CI")
    assert isinstance(report, eagleconv.PushReport) and report.ok and report.pr_url
    assert [e.path for e in report.files] == ["README.md", "config.json", "model.safetensors"]
    pulled = eagleconv.pull("org/lib", tmp_path / "p", revision="refs/pr/1", endpoint=hub.url, token=TOKEN)
    assert isinstance(pulled, eagleconv.PullReport) and pulled.ok and pulled.commit == report.commit_oid
    assert (tmp_path / "p" / "config.json").read_bytes() == (src / "config.json").read_bytes()


def test_push_runs_the_forward_pass_unless_told_not_to(hub, drafter, tmp_path):
    src = good(drafter)
    code, report = push_json(src, "org/fwd", "--endpoint", hub.url, "--dry-run", "--stage-dir", str(tmp_path / "s1"))
    assert code == 0 and report.validation.forward is not None
    steps = report.validation.forward.steps
    assert steps and all(s.finite for s in steps)
    assert not any("no forward pass" in n for n in report.notes)
    code, report = push_json(src, "org/fwd", "--endpoint", hub.url, "--dry-run", "--no-forward",
                             "--stage-dir", str(tmp_path / "s2"))
    assert code == 0 and report.validation.forward is None
    assert any("no forward pass" in n for n in report.notes)
    assert hub.requests == []
