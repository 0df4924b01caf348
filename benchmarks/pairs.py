#!/usr/bin/env python3
"""Alternating pairs: each eagleconv convert variant against `cp -r && sync`, run back to back.

On a shared, noisy VM a ratio measured from two separate series drifts with
the load; a ratio measured within a pair (baseline and variant run one after
the other, their order alternating) mostly cancels it.  For each variant the
median of the per-pair ratios is reported with its spread (min-max).

    python benchmarks/pairs.py --cache warm --repeat 5
    python benchmarks/pairs.py --cache cold --repeat 5      # drop_caches (root) before every command
    python benchmarks/pairs.py --variants check,no-numeric  # see VARIANTS

``cold`` drops the whole page cache (``echo 3 > /proc/sys/vm/drop_caches``,
root only) before every command, so the checkpoint, Python and its modules
are all read from disk; without root it evicts only the checkpoint's pages
(``posix_fadvise DONTNEED``) and says so.  ``warm`` reads the checkpoint
once before every command.  Uses the checkpoint bench.py builds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench

# name -> (extra convert arguments, environment): EAGLECONV_WRITEBACK picks the writeback strategy
# (measurement only; see eagleconv/io/writer.py)
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "check": ([], {}),
    "no-numeric": (["--no-numeric"], {}),
    "wb=fadvise": (["--no-numeric"], {"EAGLECONV_WRITEBACK": "fadvise"}),
    "wb=sfr": (["--no-numeric"], {"EAGLECONV_WRITEBACK": "sfr"}),
    "wb=thread": (["--no-numeric"], {"EAGLECONV_WRITEBACK": "thread"}),
    "wb=none": (["--no-numeric"], {"EAGLECONV_WRITEBACK": "none"}),
    "check wb=fadvise": ([], {"EAGLECONV_WRITEBACK": "fadvise"}),
    "check wb=sfr": ([], {"EAGLECONV_WRITEBACK": "sfr"}),
    "check wb=thread": ([], {"EAGLECONV_WRITEBACK": "thread"}),
    "check wb=none": ([], {"EAGLECONV_WRITEBACK": "none"}),
    "no-fsync": (["--no-numeric", "--no-fsync"], {}),
}


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def warm(src: Path) -> None:
    for path in src.iterdir():
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass


def run(argv: list[str], env: dict[str, str], out: Path) -> float:
    if out.exists():
        shutil.rmtree(out)
    os.sync()
    start = time.perf_counter()
    proc = subprocess.run(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", choices=["warm", "cold"], default="warm")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--variants", default="check,no-numeric")
    p.add_argument("--settle", type=float, default=2.0, help="idle seconds after each command")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    root = bench.HERE / ".cache" / f"kimi-k2-eagle3-v{bench.GENERATOR_VERSION}"
    src = root / "drafter"
    if not src.exists():
        raise SystemExit(f"{src} is missing: run benchmarks/bench.py once to build it")
    out = root / "work" / "pairs-out"
    out.parent.mkdir(parents=True, exist_ok=True)
    bench.byte_compile_eagleconv()
    ec = bench.eagleconv_cmd()
    baseline = ["sh", "-c", 'cp -r "$0" "$1" && sync "$1"/* "$1"', str(src), str(out)]
    names = args.variants.split(",")
    how = "warm"
    if args.cache == "cold":
        how = "drop_caches" if drop_caches() else "evict checkpoint only (not root)"

    def prepare() -> None:
        if args.cache == "warm":
            warm(src)
        elif how == "drop_caches":
            drop_caches()
        else:
            bench.evict(src)

    results: dict[str, dict[str, list[float]]] = {n: {"base": [], "variant": [], "ratio": []} for n in names}
    print(f"{src}: {args.repeat} alternating pairs per variant, cache {how}", flush=True)
    for rep in range(args.repeat):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            extra, env = VARIANTS[name]
            argv = [*ec, "convert", str(src), str(out), "--to", "vllm", *extra]
            walls = {}
            for which in (("base", "variant") if rep % 2 == 0 else ("variant", "base")):
                prepare()
                walls[which] = run(baseline if which == "base" else argv, {} if which == "base" else env, out)
                shutil.rmtree(out)
                os.sync()
                time.sleep(args.settle)
            r = results[name]
            r["base"].append(walls["base"])
            r["variant"].append(walls["variant"])
            r["ratio"].append(walls["variant"] / walls["base"])
            print(f"  [{rep + 1}/{args.repeat}] {name:18s} cp+sync {walls['base']:5.2f} s  "
                  f"convert {walls['variant']:5.2f} s  ratio {walls['variant'] / walls['base']:.2f}", flush=True)
    print(f"\n| variant ({how}) | cp -r && sync median (s) | convert median (s) | ratio median | ratio min-max |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        r = results[name]
        print(f"| {name} | {statistics.median(r['base']):.2f} | {statistics.median(r['variant']):.2f} | "
              f"{statistics.median(r['ratio']):.2f} | {min(r['ratio']):.2f}-{max(r['ratio']):.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"cache": how, "repeat": args.repeat, "results": results,
                                         "environment": bench.environment()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
