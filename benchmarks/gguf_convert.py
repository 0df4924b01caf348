#!/usr/bin/env python3
"""`convert --to gguf` of the 2.4 GB Kimi-K2-sized llama-architecture drafter against `cp` of the same bytes.

Issue 24's goal: time <= 1.5x `cp` (paired, alternating, median), peak RSS <= 200 MB.  The drafter is
bench.py's (SpecForge layout, BF16, built once and cached); the target is a GGUF holding only what the
draft takes from it (61 layers, hidden 7168, a 163840-token vocab), written here with gguf's own writer.
Each pair runs `cp SRC/model.safetensors DST && sync DST` and `eagleconv convert SRC DST.gguf --to gguf
--target T` (its defaults: fsync, NaN/Inf check) back to back, the order alternating, the checkpoint warm
(read once before each command) or cold (evicted).  Peak RSS by GNU time, as bench.py measures it.

    python benchmarks/gguf_convert.py --repeat 5 --json benchmarks/results/gguf-convert-$(date +%F).json
    python benchmarks/gguf_convert.py --repeat 5 --cold --json benchmarks/results/gguf-convert-cold-$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench


def make_target(path: Path, d: bench.Dims) -> Path:
    import gguf

    if path.exists():
        return path
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_block_count(d.target_layers)
    w.add_embedding_length(d.hidden)
    w.add_vocab_size(d.vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("kimi-k2")
    w.add_token_list([f"t{i}" for i in range(d.vocab)])
    w.add_token_types([1] * d.vocab)
    w.add_bos_token_id(163584)
    w.add_eos_token_id(163585)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="evict the checkpoint before every command")
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--cache", type=Path, default=bench.HERE / ".cache")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    root = args.cache / f"kimi-k2-eagle3-v{bench.GENERATOR_VERSION}"
    src = root / "drafter"
    if not (root / "manifest.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        manifest = bench.build_checkpoint(src, bench.KIMI_K2, False)
        (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
        print(f"built {src} in {time.perf_counter() - t:.1f} s", flush=True)
    work = root / "work"
    work.mkdir(exist_ok=True)
    target = make_target(root / "target-kimi-k2-keys.gguf", bench.KIMI_K2)
    bench.byte_compile_eagleconv()
    out_cp, out_gguf = work / "cp-out.safetensors", work / "out.gguf"
    weights = src / "model.safetensors"
    size = weights.stat().st_size
    commands = {
        "cp": ["sh", "-c", 'cp "$0" "$1" && sync "$1"', str(weights), str(out_cp)],
        "convert --to gguf": [*bench.eagleconv_cmd(), "convert", str(src), str(out_gguf), "--to", "gguf",
                              "--target", str(target)],
    }
    rows: dict[str, dict[str, list[float]]] = {n: {"wall": [], "rss": []} for n in commands}
    ratios: list[float] = []
    print(f"{src} ({size / 1e9:.2f} GB): {args.repeat} alternating pairs, cache {'cold' if args.cold else 'warm'}",
          flush=True)
    for rep in range(args.repeat):
        order = list(commands) if rep % 2 == 0 else list(commands)[::-1]
        for name in order:
            for out in (out_cp, out_gguf):
                out.unlink(missing_ok=True)
            os.sync()
            if args.cold:
                bench.evict(src)
            else:
                bench.warm_checkpoint(src) if hasattr(bench, "warm_checkpoint") else _warm(src)
            wall, rss, code = bench.run_process(commands[name], work / f"{name.split()[0]}.log")
            if code != 0:
                raise SystemExit(f"{name} failed ({code}): {(work / (name.split()[0] + '.log')).read_text()[-800:]}")
            rows[name]["wall"].append(wall)
            rows[name]["rss"].append(rss)
            time.sleep(args.settle)
        ratios.append(rows["convert --to gguf"]["wall"][-1] / rows["cp"]["wall"][-1])
        print(f"  [{rep + 1}/{args.repeat}] cp {rows['cp']['wall'][-1]:5.2f} s  convert --to gguf "
              f"{rows['convert --to gguf']['wall'][-1]:5.2f} s ({rows['convert --to gguf']['rss'][-1] / 1e6:.0f} MB)"
              f"  ratio {ratios[-1]:.2f}", flush=True)
    written = out_gguf.stat().st_size if out_gguf.exists() else None
    conv = rows["convert --to gguf"]
    summary = {
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "cp_median_s": statistics.median(rows["cp"]["wall"]), "convert_median_s": statistics.median(conv["wall"]),
        "convert_peak_rss_max_mb": max(conv["rss"]) / 1e6, "source_bytes": size, "gguf_bytes": written,
        "goal_time": statistics.median(ratios) <= 1.5, "goal_rss": max(conv["rss"]) <= 200e6,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cache": "cold" if args.cold else "warm", "repeat": args.repeat,
                                         "rows": rows, "ratios": ratios, "summary": summary,
                                         "environment": bench.environment()}, indent=2))
    return 0


def _warm(src: Path) -> None:
    for path in src.iterdir():
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass


if __name__ == "__main__":
    sys.exit(main())
