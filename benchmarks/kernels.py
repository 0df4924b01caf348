#!/usr/bin/env python3
"""eagleconv.kernels on a GPU: the fused fc_norm + concat against the ways engines run it, and against a copy.

For every (T, H) with N = 3 bf16 aux states held as one [T, N*H] buffer (how
vLLM's combine_hidden_states sees them), it times

- ``fused``: eagleconv.kernels.fc_norm_concat (one Triton launch);
- ``eager``: PyTorch's chunk -> 3 x vLLM native RMSNorm -> cat (what vLLM runs);
- ``compiled``: torch.compile of the same function;
- ``liger``: chunk -> 3 x Liger's Triton RMSNorm -> cat, when liger-kernel is installed;
- ``copy``: a device-to-device copy of the same bytes (N*T*H elements read and
  written), the practical bandwidth ceiling, measured in the same run;

and reports microseconds, GB/s (useful bytes: read N*T*H, write N*T*H, weights
once) and each path's percentage of the copy's rate.  Times are medians from
``triton.testing.do_bench`` (L2 flushed between runs); for T <= 64 a CUDA-graph
time is added (``do_bench_cudagraph``), since decode-sized calls are
launch-bound.  Goals (issue 9): T >= 8192 at >= 80% of the copy rate and faster
than every alternative; T <= 64 at least 2x faster than eager.

    python benchmarks/kernels.py                    # full table (about 2-4 minutes on an H200)
    python benchmarks/kernels.py --json out.json    # also write the numbers
    python benchmarks/kernels.py --tokens 1 8192 --hidden 4096

Without a CUDA device it says so and exits 0.  Exit 1: a kernel disagreed with
the eager path (bf16 outputs must be >= 99.9% bit-identical, at most 2 ulp), or
Triton is missing on a GPU machine.  Goals are printed, not enforced.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path

TOKENS = (1, 64, 1024, 8192, 32768)
HIDDEN = (4096, 7168)
N_AUX = 3
EPS = 1e-5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS), metavar="T")
    parser.add_argument("--hidden", type=int, nargs="+", default=list(HIDDEN), metavar="H")
    parser.add_argument("--recipe", choices=("native", "one_round"), default="native")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--smoke", action="store_true",
                        help="run the script's logic on the CPU (tiny sizes, wall-clock timer; numbers meaningless)")
    args = parser.parse_args(argv)

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from eagleconv import kernels

    if args.smoke:
        device = torch.device("cpu")
        bench, graph_bench = _wall_clock, None
        env = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "gpu": None,
               "smoke": True, "kernels_path": kernels.path_for("cpu")}
    else:
        if not torch.cuda.is_available():
            print("benchmarks/kernels.py: no GPU (torch.cuda.is_available() is False); the kernel benchmark "
                  "needs a CUDA device. Nothing measured.")
            return 0
        try:
            import triton
            from triton.testing import do_bench, do_bench_cudagraph
        except ImportError:
            print("benchmarks/kernels.py: Triton is not installed: pip install 'eagleconv[kernels]'", file=sys.stderr)
            return 1
        if kernels.path_for("cuda") != "triton":
            print(f"benchmarks/kernels.py: the kernels would run through {kernels.path_for('cuda')!r}, not compiled "
                  "Triton (unset TRITON_INTERPRET)", file=sys.stderr)
            return 1
        device = torch.device("cuda")
        props = torch.cuda.get_device_properties(device)
        env = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "gpu": props.name,
               "gpu_memory_gib": round(props.total_memory / 2**30, 1), "torch": torch.__version__,
               "triton": triton.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}

        def bench(fn: Callable[[], object]) -> float:
            return float(do_bench(fn, return_mode="median"))

        def graph_bench(fn: Callable[[], object]) -> float:
            return float(do_bench_cudagraph(fn, return_mode="median"))

    env.update({"recipe": args.recipe, "n_aux": N_AUX, "dtype": "bfloat16"})
    dtype = torch.bfloat16
    print(" ".join(f"{k}={v}" for k, v in env.items()))

    def eager(h: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
        """vLLM's combine_hidden_states with fc_norm: chunk, one native RMSNorm per chunk, cat."""
        outs = []
        for c, w in zip(h.chunk(len(ws), dim=-1), ws):
            x = c.to(torch.float32)
            x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
            outs.append((x.to(w.dtype) * w if args.recipe == "native" else x * w.float()).to(c.dtype))
        return torch.cat(outs, dim=-1)

    compiled = None if args.no_compile else torch.compile(eager, dynamic=True)
    liger = _liger(args.recipe)
    if liger is None:
        print("liger-kernel is not installed: no liger column")

    recipe_check = None if args.no_compile else _recipe_check(device)
    if recipe_check is not None:
        print("recipe under torch.compile (fraction of elements differing):", json.dumps(recipe_check))

    def shape_paths(h, ws, out) -> dict[str, Callable[[], object]]:
        """The timed paths for one shape: a function, so each closure holds this shape's tensors, not the loop's."""
        paths: dict[str, Callable[[], object]] = {
            "fused": lambda: kernels.fc_norm_concat(h.chunk(N_AUX, -1), ws, EPS, args.recipe, out=out),
            "eager": lambda: eager(h, ws),
        }
        if compiled is not None:
            paths["compiled"] = lambda: compiled(h, ws)
        if liger is not None:
            paths["liger"] = lambda: torch.cat([liger(c, w) for c, w in zip(h.chunk(N_AUX, -1), ws)], -1)
        return paths

    names = ["fused", "eager"] + ([] if compiled is None else ["compiled"]) + ([] if liger is None else ["liger"])
    rows: list[dict] = []
    failures: list[str] = []
    for hidden in args.hidden:
        gen = torch.Generator(device=device).manual_seed(hidden)
        ws = [(1 + 0.5 * torch.randn(hidden, generator=gen, device=device)).to(dtype) for _ in range(N_AUX)]
        for tokens in args.tokens:
            h = torch.randn(tokens, N_AUX * hidden, generator=gen, device=device).to(dtype)
            out = torch.empty_like(h)
            copy_dst = torch.empty_like(h)
            paths = shape_paths(h, ws, out)
            # Correctness first: every path against eager, bit level.
            reference = eager(h, ws)
            for name, fn in paths.items():
                if name == "eager":
                    continue
                result = fn()
                assert isinstance(result, torch.Tensor)
                identical, max_ulp = _ulp_compare(result, reference)
                if name == "fused" and (identical < 0.999 or max_ulp > 2):
                    failures.append(f"T={tokens} H={hidden}: fused {identical:.4%} identical to eager, max {max_ulp} ulp")
                print(f"  check T={tokens} H={hidden} {name} vs eager: {identical:.4%} identical, max {max_ulp} ulp")
            useful = 2 * h.numel() * h.element_size() + N_AUX * hidden * ws[0].element_size()
            copy_ms = bench(functools.partial(copy_dst.copy_, h))
            copy_rate = 2 * h.numel() * h.element_size() / (copy_ms * 1e-3)
            row: dict = {"T": tokens, "H": hidden, "bytes": useful, "copy_us": copy_ms * 1e3,
                         "copy_GBps": copy_rate / 1e9}
            for name, fn in paths.items():
                ms = bench(fn)
                row[f"{name}_us"] = ms * 1e3
                row[f"{name}_GBps"] = useful / (ms * 1e-3) / 1e9
                row[f"{name}_pct_copy"] = 100 * useful / (ms * 1e-3) / copy_rate
                if tokens <= 64 and name in ("fused", "eager") and graph_bench is not None:
                    row[f"{name}_graph_us"] = graph_bench(fn) * 1e3
            rows.append(row)
            del h, out, copy_dst, paths, fn  # the paths hold the tensors too
            if device.type == "cuda":
                torch.cuda.empty_cache()

    _print_table(rows, names)
    goals = _goals(rows) if not args.smoke else ["--smoke: timings are not measurements; goals not judged"]
    for line in goals:
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"env": env, "rows": rows, "goals": goals, "failures": failures,
                                          "recipe_check": recipe_check}, indent=2))
        print(f"wrote {args.json}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _recipe_check(device) -> dict[str, dict[str, float]]:
    """Which recipe torch.compile of vLLM's native formula yields (kernels.md §8.3 step 2, open question 1).

    Inductor may drop the intermediate bf16 cast; compare its output with eager
    native and with one_round, with emulate_precision_casts off and on.
    """
    import torch
    import torch._inductor.config as inductor_config

    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(256, 4096, generator=gen, device=device)
    x[:, :4] *= 300.0
    x = x.to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(4096, generator=gen, device=device)).to(torch.bfloat16)

    def native(x, w):
        orig = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
        return (x.to(w.dtype) * w).to(orig)

    def one_round(x, w):
        x32 = x.to(torch.float32)
        return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + EPS) * w.float()).to(x.dtype)

    eager_native, eager_one = native(x, w), one_round(x, w)
    result = {}
    saved = inductor_config.emulate_precision_casts
    try:
        for flag in (False, True):
            torch._dynamo.reset()
            inductor_config.emulate_precision_casts = flag
            compiled = torch.compile(native)(x, w)
            result[f"emulate_precision_casts={flag}"] = {
                "vs_eager_native": float((compiled != eager_native).double().mean()),
                "vs_one_round": float((compiled != eager_one).double().mean())}
    finally:
        inductor_config.emulate_precision_casts = saved
        torch._dynamo.reset()
    result["eager_native_vs_one_round"] = {"fraction": float((eager_native != eager_one).double().mean())}
    return result


def _wall_clock(fn: Callable[[], object]) -> float:
    """Median milliseconds of 3 calls after one warm-up (the --smoke timer; CPU numbers mean nothing)."""
    import statistics
    import time

    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _liger(recipe: str):
    """Liger's RMSNorm as f(x, w), or None when liger-kernel is not installed."""
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None
    mode = "llama" if recipe == "native" else "gemma"  # llama = round first; gemma = fp32 multiply, one rounding

    def run(x, w):
        return LigerRMSNormFunction.apply(x, w, EPS, 0.0, mode)

    return run


def _ulp_compare(a, b) -> tuple[float, int]:
    import torch

    def ordered(t):
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits & 0x7FFF)

    ulps = (ordered(a) - ordered(b)).abs()
    return float((ulps == 0).double().mean()), int(ulps.max())


def _print_table(rows: list[dict], names: list[str]) -> None:
    head = f"{'H':>5} {'T':>6} {'MB':>8} {'copy GB/s':>9}"
    for name in names:
        head += f" | {name + ' us':>12} {'GB/s':>7} {'%copy':>6}"
    head += " | graph us fused/eager"
    print(head)
    for r in rows:
        line = f"{r['H']:>5} {r['T']:>6} {r['bytes'] / 1e6:>8.2f} {r['copy_GBps']:>9.0f}"
        for name in names:
            line += f" | {r[name + '_us']:>12.1f} {r[name + '_GBps']:>7.0f} {r[name + '_pct_copy']:>5.1f}%"
        if "fused_graph_us" in r:
            line += f" | {r['fused_graph_us']:.1f}/{r['eager_graph_us']:.1f}"
        print(line)


def _goals(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        alternatives = {k[:-3]: v for k, v in r.items() if k.endswith("_us") and k not in ("fused_us", "copy_us")
                        and "graph" not in k}
        if r["T"] >= 8192:
            fastest = all(r["fused_us"] < v for v in alternatives.values())
            ok = r["fused_pct_copy"] >= 80 and fastest
            out.append(f"goal T={r['T']} H={r['H']}: {r['fused_pct_copy']:.1f}% of copy (>= 80%), "
                       f"{'faster than' if fastest else 'NOT faster than'} every alternative: "
                       f"{'PASS' if ok else 'FAIL'}")
        if r["T"] <= 64:
            speedup = r["eager_us"] / r["fused_us"]
            out.append(f"goal T={r['T']} H={r['H']}: {speedup:.2f}x faster than eager (>= 2x): "
                       f"{'PASS' if speedup >= 2 else 'FAIL'}")
    return out


if __name__ == "__main__":
    sys.exit(main())
