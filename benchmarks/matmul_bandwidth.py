"""How many bytes of float32 weights per second a decode-sized product reads, by each CPU path, against the memory's
streaming rate: why simulate multiplies through oneDNN with weights reordered once (benchmarks/RESULTS.md).

    python benchmarks/matmul_bandwidth.py [--threads N] [--weights 100]

Each product reads a different [1536 x 576] weight (SmolLM2's MLP shape), ``--weights`` of them, so that nothing
is served from cache; rows 16 and 4 are a 4-prompt decode step at K=3 and one row per prompt.
"""

from __future__ import annotations

import argparse
import time

import torch


def rate(fn, nbytes: int, repeat: int = 5) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return nbytes * repeat / (time.perf_counter() - start) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--weights", type=int, default=100)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(1536, 576, generator=g) for _ in range(args.weights)]
    nbytes = sum(w.numel() * 4 for w in ws)
    big = torch.randn(135_000_000, generator=g)
    print(f"threads {torch.get_num_threads()}; {nbytes / 1e6:.0f} MB of weights")
    print(f"  x.sum() over {big.numel() * 4 / 1e6:.0f} MB (streaming): {rate(lambda: big.sum(), big.numel() * 4):.1f} GB/s")
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, 32) for w in ws]
    for rows in (16, 4):
        x = torch.randn(1, rows, 576, generator=g)
        mm = rate(lambda x=x: [x @ w.T for w in ws], nbytes)
        dnn = rate(lambda x=x: [torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "") for p in packed], nbytes)
        print(f"  rows {rows:2d}: x @ W.T (torch's default) {mm:.1f} GB/s; oneDNN, reordered once {dnn:.1f} GB/s")


if __name__ == "__main__":
    main()
