"""validate --forward / diff set OMP_WAIT_POLICY=PASSIVE before torch loads, unless the user chose a policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, os, sys
from eagleconv.cli.main import main
sys.argv = ["eagleconv", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps({"policy": os.environ.get("OMP_WAIT_POLICY"), "torch": "torch" in sys.modules}), file=sys.stderr)
"""


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_forward_commands_make_idle_openmp_threads_sleep(given: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if given:
        env["OMP_WAIT_POLICY"] = given
    fixture = str(ROOT / "fixtures" / "specforge-llama-eagle3")
    for args in (["validate", fixture, "--forward", "--steps", "1", "--no-numeric", "--json"],
                 ["diff", fixture, fixture, "--steps", "1", "--json"]):
        done = subprocess.run([sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True, text=True,
                              timeout=300)
        state = json.loads(done.stderr.strip().splitlines()[-1])
        assert state == {"policy": given or "PASSIVE", "torch": True}, done.stderr[-2000:]
        report = json.loads(done.stdout)
        assert (report["forward"]["steps"] if args[0] == "validate" else report["steps"])  # the forward ran


def test_simulate_leaves_openmps_wait_policy_to_openmp() -> None:
    """simulate's thousands of small products per step ran 1.3-1.7x slower with sleeping threads: it sets no policy."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    pair = ROOT / "fixtures" / "tiny-pair"
    done = subprocess.run([sys.executable, "-c", SCRIPT, "simulate", str(pair / "eagle3"), "--target",
                           str(pair / "target"), "--max-tokens", "2", "--json"], env=env, capture_output=True,
                          text=True, timeout=300)
    state = json.loads(done.stderr.strip().splitlines()[-1])
    assert state == {"policy": None, "torch": True}, done.stderr[-2000:]
    assert json.loads(done.stdout)["num_drafts"] > 0
