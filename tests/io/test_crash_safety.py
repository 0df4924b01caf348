"""Crash safety (issue 10, capability 1): SIGKILL a multi-shard convert at seeded random moments.

After every kill: the destination is absent or a complete, valid output (byte for byte one that a
clean run writes), the previous output is intact whenever the new one is absent, the source is
unchanged (sha256), and the next run leaves no debris.  A third of the --overwrite runs take the
non-atomic fallback (no RENAME_EXCHANGE), where a kill between its two renames must be undone by
the next run.  Bounded: 24 kills (at most 96 runs) of ~1 s processes.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from eagleconv import convert
from eagleconv.synthetic import DrafterRecipe, TinyDims, make_drafter

REPO = Path(__file__).resolve().parents[2]
KILLS = 24
DIMS = TinyDims(hidden=256, target_hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=4096, vocab=8192,
                draft_vocab=4096)
SHARD = "1MB"

_CHILD = """
import sys
from eagleconv.io import staging
from eagleconv.cli.main import main
if sys.argv[1] == "fallback":
    staging.exchange = lambda a, b: False  # as on a filesystem without renameat2(RENAME_EXCHANGE)
sys.argv = ["eagleconv"] + sys.argv[2:]
main()
"""


def tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def sha256s(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def debris(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".eagleconv-" in p.name)


def test_sigkill_at_random_moments_never_loses_or_half_publishes(tmp_path):
    src = make_drafter(tmp_path / "src", DrafterRecipe(producer="specforge", dims=DIMS, seed=1))
    other = make_drafter(tmp_path / "other", DrafterRecipe(producer="torchspec", dims=DIMS, seed=2))
    source_digests = sha256s(src)
    # what a clean run writes (the new output) and the output it replaces (the previous one)
    convert(src, tmp_path / "ref-new", "vllm", max_shard_size=1_000_000)
    convert(other, tmp_path / "ref-old", "vllm", max_shard_size=1_000_000)
    new, old = tree(tmp_path / "ref-new"), tree(tmp_path / "ref-old")
    assert sum(n.endswith(".safetensors") for n in new) >= 3, "the fixture must be multi-shard"

    work = tmp_path / "work"
    work.mkdir()
    dst = work / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def spawn(mode: str, overwrite: bool) -> subprocess.Popen:
        argv = [sys.executable, "-c", _CHILD, mode, "convert", str(src), str(dst), "--to", "vllm",
                "--max-shard-size", SHARD] + (["--overwrite"] if overwrite else [])
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    # calibrate: how long a whole run takes, and how long it spends with a staging directory
    started = time.monotonic()
    child = spawn("atomic", False)
    staged_at = None
    while child.poll() is None:
        if staged_at is None and debris(work):
            staged_at = time.monotonic()
        time.sleep(0.001)
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""
    total = time.monotonic() - started
    writing = time.monotonic() - staged_at if staged_at else total / 4
    assert tree(dst) == new

    def covered(outcomes: dict[str, int]) -> bool:
        """The kills landed in the interesting places, not only during start-up."""
        return (sum(v for k, v in outcomes.items() if "debris" in k or k == "old restored") >= 5
                and sum(v for k, v in outcomes.items() if k.startswith("new")) >= 1)

    rng = random.Random(20261201)
    outcomes: dict[str, int] = {}
    kills = 0
    # Timing on a loaded machine varies, so the loop runs until it has KILLS kills *and* the coverage
    # (bounded at 4 * KILLS runs) instead of asserting what a fixed number of random moments hit.
    for i in range(4 * KILLS):
        if kills >= KILLS and covered(outcomes):
            break
        mode = rng.choice(["fresh", "overwrite", "overwrite-fallback"])
        moment = rng.choices(["anywhere", "writing", "published"], weights=[0.3, 0.55, 0.15])[0]
        if dst.exists():
            shutil.rmtree(dst)
        if mode != "fresh":
            shutil.copytree(tmp_path / "ref-old", dst)
        child = spawn("fallback" if mode == "overwrite-fallback" else "atomic", mode != "fresh")
        deadline = time.monotonic() + 30
        if moment == "anywhere":  # start-up included
            time.sleep(rng.uniform(0, total))
        elif moment == "writing":  # while it writes and publishes
            while not debris(work) and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.0005)
            time.sleep(rng.uniform(0, 0.8 * writing))
        else:  # just after the output appears (fresh) or the staging directory goes, before the process ends
            while child.poll() is None and time.monotonic() < deadline and not (
                    dst.exists() if mode == "fresh" else debris(work)):
                time.sleep(0.0005)
            while mode != "fresh" and child.poll() is None and debris(work) and time.monotonic() < deadline:
                time.sleep(0.0005)
        finished = child.poll() is not None  # too late: it completed (still checked, not counted as a kill)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        kills += not finished
        left = debris(work)

        assert sha256s(src) == source_digests, f"kill {i}: the source changed"
        if dst.exists():
            state = tree(dst)
            assert state == new or (mode != "fresh" and state == old), f"kill {i} ({mode}): destination is neither output"
            outcome = "finished" if finished else "new" if state == new else "old kept"
        else:
            if mode == "overwrite":  # RENAME_EXCHANGE never leaves the destination absent
                raise AssertionError(f"kill {i}: --overwrite lost the destination ({left})")
            if mode == "overwrite-fallback":
                from eagleconv.io.debris import recover

                notes = recover(dst)  # what the next run does first
                assert tree(dst) == old, f"kill {i}: the previous output was not restored ({left})"
                assert any("restored the previous output" in n for n in notes)
                outcome = "old restored"
            else:
                outcome = "absent"
        outcomes[outcome + (" + debris" if left else "")] = outcomes.get(outcome + (" + debris" if left else ""), 0) + 1

        # the next run cleans up after the dead one and publishes the new output
        report = convert(src, dst, "vllm", max_shard_size=1_000_000, overwrite=True)
        assert debris(work) == [], f"kill {i}: the next run left {debris(work)}"
        assert tree(dst) == new
        if left:
            assert any("no longer running" in n or "restored" in n for n in report.notes) or outcome == "old restored"

    print("crash outcomes:", outcomes)
    assert kills >= KILLS, f"only {kills} runs were killed before they finished: {outcomes}"
    assert covered(outcomes), f"the kills missed the interesting places: {outcomes}"
