"""simulate against the engines it predicts, whole process, paired and alternating (issue 37).

    python benchmarks/simulate_vs_engines.py --pair PAIR [--repeat N] [--vllm] [--json OUT]
    python benchmarks/simulate_vs_engines.py --pair PAIR --breakdown [--loop vllm|server|simple]

The job is issue 37's: the SmolLM2 pair's ``eagle3``, K=3, ``prompts.json``, 64 tokens, float32, greedy.  Each pair
of runs alternates its order (odd pairs engine first) so that the machine's noise hits both sides; each side is a
whole process as a user runs it, from a cold interpreter:

* ``llama-server``: ``simulate --engine llama.cpp`` (server loop) against llama-server b11434 (``-t 1 --poll 0
  --metrics``, the flags .ci/measure-servers runs it with) started, waited for on /health, then the prompts through
  ``eagleconv measure --against`` that simulate report (which must exit 0: the same tokens and counters), then
  stopped: start + prompts, as the issue timed it;
* ``speculative-simple``: ``simulate --engine llama.cpp --llamacpp-loop simple`` against llama-speculative-simple
  (``-t 1 --poll 0``), one process per prompt as it takes one; simulate's drafts, tokens and counters must equal its
  traces (.ci/llamacpp_parity.compare);
* ``vllm-loop``: ``simulate --engine llama.cpp`` against ``simulate`` (vLLM's loop), both eagleconv: the issue's
  goal that the llama.cpp loop costs at most 1.1x the vLLM loop;
* ``--vllm``: ``simulate`` against vLLM 0.32.0 as a user's script runs it (benchmarks/simulate_vs_vllm.py's
  ``default`` mode; ~2 min a run), tokens and counters compared.

The GGUFs llama.cpp reads are converted once beforehand by its own converter (cached in ``--work``), as a user
converts once.  Each row: the two sides' seconds, the median of the per-pair ratios (simulate / engine: under 1 is
simulate faster) with their min-max, and the 1-minute load average before every run (/proc/loadavg).

``--breakdown``: one simulate in this process, timed by phase (interpreter start and imports are measured as
separate cold processes): where the time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / ".ci")]
K, MAX_TOKENS = 3, 64


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False, **kw)
    return time.perf_counter() - start, proc


def run_simulate(pair: Path, engine: str, out: Path, tree: Path = REPO) -> float:
    """``python -m eagleconv simulate ... --json > out`` as a user runs it (default threads), with the eagleconv of
    ``tree`` (another checkout: ``--baseline``); its seconds."""
    loop = {"vllm": [], "server": ["--engine", "llama.cpp"],
            "simple": ["--engine", "llama.cpp", "--llamacpp-loop", "simple"]}[engine]
    cmd = [sys.executable, "-m", "eagleconv", "simulate", str(pair / "eagle3"), "--target", str(pair / "target"),
           "--prompts", str(pair / "prompts.json"), "--num-speculative-tokens", str(K), "--max-tokens",
           str(MAX_TOKENS), *loop, "--json"]
    with open(out, "w") as f:
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, cwd=tree, check=False,
                              env={**os.environ, "PYTHONPATH": str(tree)})
        seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"simulate ({engine}) failed: {proc.stderr[-1000:]}")
    return seconds


def ggufs(build: Path, pair: Path, work: Path) -> tuple[Path, Path]:
    from llamacpp_parity import their_gguf

    out = []
    for what in ("target", "eagle3"):
        path = work / f"{what}.gguf"
        if not path.exists():
            made, err = their_gguf(build, pair / what, pair / "target", path)
            if made is None:
                raise SystemExit(f"llama.cpp's converter failed on {what}: {err}")
        out.append(path)
    return out[0], out[1]


def run_server(build: Path, target: Path, draft: Path, pair: Path, against: Path, work: Path) -> tuple[float, float]:
    """Whole process: llama-server started and healthy, the prompts measured against simulate's report, stopped.
    (seconds in all, seconds to /health)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "LD_LIBRARY_PATH": str(build / "bin")}
    cmd = [str(build / "bin" / "llama-server"), "-m", str(target), "--spec-type", "draft-eagle3", "-md", str(draft),
           "--spec-draft-n-max", str(K), "--spec-draft-n-min", str(K), "--spec-draft-p-min", "0", "-c", "512",
           "-np", "1", "--metrics", "--host", "127.0.0.1", "--port", str(port), "-t", "1", "--poll", "0"]
    start = time.perf_counter()
    with open(work / "llama-server.log", "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"llama-server exited ({server.returncode}): see {work / 'llama-server.log'}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.05)
        healthy = time.perf_counter() - start
        _, proc = timed([sys.executable, "-m", "eagleconv", "measure", url, "--engine", "llama.cpp", "--prompts",
                         str(pair / "prompts.json"), "--max-tokens", str(MAX_TOKENS), "--against", str(against),
                         "--json"], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        seconds = time.perf_counter() - start
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    if proc.returncode:
        raise SystemExit(f"measure --against differs from simulate or failed: {proc.stdout[-800:]}{proc.stderr[-800:]}")
    return seconds, healthy


def run_simple(build: Path, target: Path, draft: Path, texts: list[str], work: Path) -> tuple[float, list[dict]]:
    """llama-speculative-simple once per prompt (.ci/llamacpp_parity's command, ``--poll 0`` added), summed."""
    from llamacpp_trace import parse

    env = {**os.environ, "LD_LIBRARY_PATH": str(build / "bin")}
    total, traces = 0.0, []
    for i, text in enumerate(texts):
        prompt = work / f"prompt-{i}.txt"
        prompt.write_bytes(text.encode())
        seconds, proc = timed([str(build / "bin" / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
                               "--spec-type", "draft-eagle3", "-bf", str(prompt), "--no-escape", "-n",
                               str(MAX_TOKENS), "--temp", "0", "--spec-draft-n-max", str(K), "-t", "1", "--poll", "0",
                               "-c", "1024", "-v"], env=env)
        if proc.returncode:
            raise SystemExit(f"llama-speculative-simple failed: {proc.stderr[-800:]}")
        total += seconds
        traces.append(parse(proc.stderr))
    return total, traces


def paired(name: str, repeat: int, ours, theirs) -> dict:
    """``repeat`` alternating pairs of (simulate side, engine side); each callable returns its seconds."""
    a, b, loads = [], [], []
    for i in range(repeat):
        for side in (("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")):
            loads.append(load())
            (a if side == "ours" else b).append(round(ours() if side == "ours" else theirs(), 2))
        print(f"{name} pair {i + 1}: simulate {a[-1]:.1f} s, engine {b[-1]:.1f} s, ratio {a[-1] / b[-1]:.2f}, "
              f"load {loads[-2:]}", flush=True)
    ratios = [x / y for x, y in zip(a, b)]
    return {"simulate_s": a, "engine_s": b, "pair_ratios": [round(r, 3) for r in ratios],
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_min_max": [round(min(ratios), 3), round(max(ratios), 3)], "load_1min": loads}


def breakdown(pair: Path, loop: str) -> dict:
    """Where one simulate's time goes, by phase (this process, warm imports aside; interpreter and imports cold)."""
    cold = {}
    imports = "import eagleconv.simulation, torch; import eagleconv.forward.native_target"
    for what, code in (("interpreter", "pass"), ("imports", imports)):
        cold[what] = round(min(timed([sys.executable, "-c", code], cwd=REPO,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})[0] for _ in range(3)), 2)
    import torch

    import eagleconv.simulation as simulate_mod
    from eagleconv.forward import native_target
    from eagleconv.simulation import drafter as drafter_mod
    from eagleconv.simulation import loop as loop_mod
    from eagleconv.simulation import simulate

    spent: dict[str, float] = {}

    def clock(owner, name: str, key: str):
        real = getattr(owner, name)

        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
        setattr(owner, name, wrapper)

    clock(native_target.NativeTarget, "__init__", "weights: target")
    clock(drafter_mod, "engine_drafter", "weights: drafter")  # llama.cpp's loops look it up here
    clock(simulate_mod, "engine_drafter", "weights: drafter")  # vLLM's imported it by name
    clock(loop_mod.Cached, "prefill", "prefill")
    clock(loop_mod.Cached, "verify", "rounds: target")
    clock(loop_mod.Cached, "draft", "rounds: drafter")
    kw = {} if loop == "vllm" else {"engine": "llama.cpp", "llamacpp_loop": loop}
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    report = simulate(pair / "eagle3", pair / "target", pair / "prompts.json", num_speculative_tokens=K,
                      max_tokens=MAX_TOKENS, threads=1, **kw)
    total = time.perf_counter() - t0
    t1 = time.perf_counter()
    report.model_dump_json(indent=2)
    spent["report"] = time.perf_counter() - t1
    spent["other (config and prompt checks, packing, bookkeeping)"] = total - sum(
        v for k, v in spent.items() if k != "report")
    return {"loop": loop, "threads": 1, **{k: round(v, 2) for k, v in cold.items()},
            **{k: round(v, 2) for k, v in spent.items()}, "simulate() total": round(total, 2),
            "rounds": report.num_drafts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, required=True, help="the SmolLM2 pair (fixtures/smollm2/build.py prints it)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", action="append", choices=("llama-server", "speculative-simple", "vllm-loop"),
                    help="run only these comparisons (default: all three)")
    ap.add_argument("--baseline", type=Path, help="also each llama.cpp loop against another checkout's simulate "
                    "(e.g. main's, unpacked with git archive): the same reports required")
    ap.add_argument("--vllm", action="store_true", help="also simulate against vLLM 0.32.0 (~2 min a run)")
    ap.add_argument("--vllm-repeat", type=int, default=1)
    ap.add_argument("--work", type=Path, help="where the GGUFs are cached (default: a temporary directory)")
    ap.add_argument("--breakdown", action="store_true", help="time one simulate by phase instead")
    ap.add_argument("--loop", default="server", choices=("vllm", "server", "simple"), help="--breakdown's loop")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    pair = args.pair.resolve()
    if args.breakdown:
        row = breakdown(pair, args.loop)
        print(json.dumps(row, indent=1))
        if args.json:
            args.json.write_text(json.dumps(row, indent=1) + "\n")
        return 0
    from tests.support.ci_cache import llamacpp_build

    build = llamacpp_build()
    work = args.work or Path(tempfile.mkdtemp(prefix="simulate-vs-engines-"))
    work.mkdir(parents=True, exist_ok=True)
    only = args.only or ["llama-server", "speculative-simple", "vllm-loop"]
    rows: dict = {"pair": str(pair), "k": K, "max_tokens": MAX_TOKENS, "cpus": os.cpu_count(),
                  "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    sims = {e: work / f"simulate-{e}.json" for e in ("vllm", "server", "simple")}
    if {"llama-server", "speculative-simple"} & set(only):
        if build is None:
            raise SystemExit("no cached llama.cpp b11434 build (bash .ci/llamacpp-env)")
        target, draft = ggufs(build, pair, work)
    if "llama-server" in only:
        run_simulate(pair, "server", sims["server"])  # the report measure --against compares with (untimed)
        starts: list[float] = []

        def server() -> float:
            seconds, healthy = run_server(build, target, draft, pair, sims["server"], work)
            starts.append(round(healthy, 2))
            return seconds

        rows["llama-server"] = {**paired("llama-server", args.repeat,
                                         lambda: run_simulate(pair, "server", sims["server"]), server),
                                "server_start_s": starts}
    if "speculative-simple" in only:
        from llamacpp_parity import compare
        from tokenizers import Tokenizer

        prompts = json.loads((pair / "prompts.json").read_text())
        tok = Tokenizer.from_file(str(pair / "target" / "tokenizer.json"))
        texts = [tok.decode(p, skip_special_tokens=False) for p in prompts]
        problems: list[str] = []

        def simple() -> float:
            seconds, traces = run_simple(build, target, draft, texts, work)
            problems.extend(compare(json.loads(sims["simple"].read_text()), traces))
            return seconds

        rows["speculative-simple"] = paired("speculative-simple", args.repeat,
                                            lambda: run_simulate(pair, "simple", sims["simple"]), simple)
        rows["speculative-simple"]["differences"] = sorted(set(problems))
    if "vllm-loop" in only:
        rows["vllm-loop"] = paired("vllm-loop", args.repeat, lambda: run_simulate(pair, "server", sims["server"]),
                                   lambda: run_simulate(pair, "vllm", sims["vllm"]))
    if args.baseline:
        for loop in ("server", "simple"):
            theirs = work / f"baseline-{loop}.json"
            rows[f"baseline-{loop}"] = paired(f"baseline-{loop}", args.repeat,
                                              lambda: run_simulate(pair, loop, sims[loop]),  # noqa: B023
                                              lambda: run_simulate(pair, loop, theirs, args.baseline.resolve()))  # noqa: B023
            a, b = (json.loads(f.read_text()) for f in (sims[loop], theirs))
            # notes aside: the default threads' note names the load of the moment
            rows[f"baseline-{loop}"]["identical_reports"] = {k: v for k, v in a.items() if k != "notes"} == \
                {k: v for k, v in b.items() if k != "notes"}
    if args.vllm:
        from simulate_vs_vllm import VENV, run_vllm

        if not (VENV / ".ready").exists():
            raise SystemExit(f"no vLLM virtualenv at {VENV}: run .ci/vllm-env first")
        same: list[bool] = []

        def vllm() -> float:
            seconds, result = run_vllm(pair / "eagle3", pair / "target", pair / "prompts.json", K, MAX_TOKENS, work,
                                       "default")
            ours = json.loads(sims["vllm"].read_text())
            same.append(all(ours[k] == result[k] for k in ("tokens", "num_drafts", "num_draft_tokens",
                                                             "num_accepted_tokens", "accepted_per_position")))
            return seconds

        rows["vllm"] = {**paired("vllm", args.vllm_repeat, lambda: run_simulate(pair, "vllm", sims["vllm"]), vllm),
                        "identical_tokens_and_counters": same}
    print(json.dumps(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
