"""Issue 33's goals on the loopback Hub (tests/support/fake_hub.py): a Hub drafter judged from its headers.

1. ``eagleconv validate hf://big/drafter --json`` on a 5.6 GB speculators drafter (a sparse file on the server
   side: its header, d2t and t2d, then zeros): bytes transferred (the report's ``hub.bytes_transferred``: every
   answer's body) and wall time, in rotating order with ``eagleconv --help`` (the start-up) and
   ``eagleconv validate --no-numeric`` of the same files as a sparse local directory (the same checks without
   HTTP); the figures are the medians of the per-round differences.  Goal: <= 1 MB and
   <= 2 s after start-up.  Before this issue the command downloaded the 5.6 GB snapshot.
2. ``eagleconv audit --from LIST --jobs 16 --out rows.jsonl --json`` over N repositories (every fixture
   drafter published N / 10 times under other names), paired with the same audit at ``--jobs 4``: wall time
   and peak RSS (GNU time's %M) of each.  Goal: 1,000 repositories <= 60 s, <= 300 MB.

The server runs in this process (threads), so on a small machine it competes with the audited command for
the CPUs: the figures are an upper bound on what the command itself needs.

    python benchmarks/hub_headers.py --repeat 3 --repos 1000 --json benchmarks/results/hub-headers-$(date -u +%F).json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.fake_hub import FakeHub  # noqa: E402 (after the sys.path insert)
from tests.support.hub_repos import (  # noqa: E402 (after the sys.path insert)
    big_drafter,
    directory_files,
    fixture_checkpoints,
    write_sparse,
)


def timed(command: list[str], env: dict[str, str]) -> dict[str, float | int | str]:
    """Wall seconds and peak RSS (MB) of one command run under GNU time; its stdout."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as rss:
        started = time.monotonic()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *command], env=env, capture_output=True,
                              text=True, check=False)
        wall = time.monotonic() - started
        peak = int(rss.read().strip().splitlines()[-1]) / 1024
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    return {"wall_s": round(wall, 3), "rss_mb": round(peak, 1), "stdout": done.stdout}


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--repos", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    hub = FakeHub().start()
    big = big_drafter()
    hub.add("big/drafter-eagle3", big)
    local = write_sparse(big, Path(tempfile.mkdtemp()) / "drafter-eagle3")
    drafters = [d for name, d in fixture_checkpoints().items() if "eagle-llama" not in name and "target" not in name]
    for i in range(args.repos):
        hub.add(f"org{i % 50}/drafter-{i}-eagle3", directory_files(drafters[i % len(drafters)]))
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "PYTHONPATH": str(ROOT)}
    env.pop("HF_TOKEN", None)
    eagleconv = [sys.executable, "-m", "eagleconv"]
    result: dict[str, object] = {"load_before": os.getloadavg(), "repos": args.repos, "cpus": os.cpu_count()}

    pairs = []
    for r in range(args.repeat):
        names = ["help", "validate", "local"]
        order = names[r % 3:] + names[:r % 3]
        run = {}
        for name in order:
            command = eagleconv + {"help": ["--help"],
                                   "validate": ["validate", "hf://big/drafter-eagle3", "--engine", "vllm", "--json"],
                                   "local": ["validate", str(local), "--no-numeric", "--engine", "vllm", "--json"]}[name]
            run[name] = timed(command, env)
        report = json.loads(str(run["validate"].pop("stdout")))
        run["help"].pop("stdout")
        run["local"].pop("stdout")
        run["bytes_transferred"] = report["hub"]["bytes_transferred"]
        run["requests"] = report["hub"]["requests"]
        pairs.append(run)
    after = [float(p["validate"]["wall_s"]) - float(p["help"]["wall_s"]) for p in pairs]  # type: ignore[index]
    over_local = [float(p["validate"]["wall_s"]) - float(p["local"]["wall_s"]) for p in pairs]  # type: ignore[index]
    result["validate"] = {"pairs": pairs, "after_startup_s": spread(after), "over_local_s": spread(over_local),
                          "local_wall_s": spread([float(p["local"]["wall_s"]) for p in pairs]),  # type: ignore[index]
                          "validate_wall_s": spread([float(p["validate"]["wall_s"]) for p in pairs]),  # type: ignore[index]
                          "bytes_transferred": max(int(p["bytes_transferred"]) for p in pairs),  # type: ignore[call-overload]
                          "drafter_bytes": hub.repos["big/drafter-eagle3"].commits[
                              hub.repos["big/drafter-eagle3"].refs["main"]]["model.safetensors"].__len__()}
    print(json.dumps(result["validate"], indent=1, default=str)[:2000])

    listing = Path(tempfile.mkdtemp()) / "repos.txt"
    listing.write_text("\n".join(r for r in hub.repos if r.startswith("org")) + "\n")
    audits = []
    for r in range(args.repeat):
        order = [16, 4] if r % 2 == 0 else [4, 16]
        run = {}
        for jobs in order:
            out = listing.parent / f"rows-{r}-{jobs}.jsonl"
            measured = timed(eagleconv + ["audit", "--from", str(listing), "--jobs", str(jobs), "--out", str(out),
                                          "--engine", "vllm", "--engine", "llama.cpp", "--json"], env)
            summary = json.loads(str(measured.pop("stdout")))
            lines = out.read_bytes().splitlines()
            assert len(lines) == len({json.loads(x)["repo_id"] for x in lines}) == args.repos
            measured["states"] = summary["states"]
            run[f"jobs{jobs}"] = measured
        audits.append(run)
        print(json.dumps(run, default=str))
    result["audit"] = {"pairs": audits,
                       "jobs16_wall_s": spread([float(a["jobs16"]["wall_s"]) for a in audits]),
                       "jobs16_rss_mb": spread([float(a["jobs16"]["rss_mb"]) for a in audits]),
                       "jobs4_wall_s": spread([float(a["jobs4"]["wall_s"]) for a in audits]),
                       "ratio_jobs16_over_jobs4": spread([float(a["jobs16"]["wall_s"]) / float(a["jobs4"]["wall_s"])
                                                          for a in audits])}
    result["load_after"] = os.getloadavg()
    hub.stop()
    text = json.dumps(result, indent=1, default=str)
    if args.json:
        args.json.write_text(text + "\n")
    print(json.dumps({k: result[k] for k in ("load_before", "load_after")}),
          json.dumps({k: v for k, v in result["audit"].items() if k != "pairs"}))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
