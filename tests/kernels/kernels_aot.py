"""Compile eagleconv.kernels' Triton kernels for a GPU target without a GPU (Triton ships ptxas).

Run as a script with TRITON_INTERPRET unset (tests/kernels/test_kernels.py does): for each kernel variant it
prints one JSON line with the PTX's global load/store widths and whether it uses an approximate rsqrt,
so a CPU-only CI catches kernels that would not compile on an H100/H200 and loads that lost their
128-bit vectorisation.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from eagleconv.kernels import _triton as K

TARGET = GPUTarget("cuda", 90, 32)  # Hopper (H100/H200), warp size 32


def _compile(kernel, signature: dict[str, str], constexprs: dict, num_warps: int):
    names = kernel.arg_names
    # Runtime specialisation: 16-byte aligned pointers, strides and H divisible by 16 (all real hidden sizes).
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n, t in signature.items()
               if t.startswith("*") or n.startswith(("S", "stride")) or n == "H"}
    for name in constexprs:
        signature[name] = "constexpr"
    return triton.compile(ASTSource(kernel, signature, constexprs=constexprs, attrs=aligned), target=TARGET,
                          options={"num_warps": num_warps})


def fc_norm_concat(dtype: str, wdtype: str, n: int, hidden: int, recipe: str):
    block_h = triton.next_power_of_2(hidden)
    rows = max(1, min(16, 8192 // block_h))
    warps = 4 if block_h < 2048 else 8 if block_h < 8192 else 16
    sig = {f"X{i}": f"*{dtype}" for i in range(8)} | {f"S{i}": "i32" for i in range(8)}
    sig |= {f"W{i}": f"*{wdtype}" for i in range(8)}
    sig |= {"Y": f"*{dtype}", "stride_y": "i32", "T": "i32", "H": "i32", "eps": "fp32"}
    return _compile(K._fc_norm_concat_kernel, sig, {"N": n, "BLOCK_H": block_h, "ROWS": rows,
                                                    "ROUND_FIRST": recipe == "native"}, warps)


def fused_add(dtype: str, wdtype: str, hidden: int, recipe: str, rounded_sum: bool):
    block_h = triton.next_power_of_2(hidden)
    sig = {"X": f"*{dtype}", "stride_x": "i32", "R": f"*{dtype}", "stride_r": "i32", "W": f"*{wdtype}",
           "Y": f"*{dtype}", "stride_y": "i32", "RO": f"*{dtype}", "stride_ro": "i32", "T": "i32", "H": "i32",
           "eps": "fp32"}
    return _compile(K._fused_add_rms_norm_kernel, sig, {"BLOCK_H": block_h, "ROWS": max(1, min(16, 8192 // block_h)),
                                                        "ROUND_FIRST": recipe == "native", "ROUNDED_SUM": rounded_sum}, 8)


def summary(name: str, compiled) -> dict:
    ptx = compiled.asm["ptx"]
    return {"variant": name,
            "ld_v4": ptx.count("ld.global.v4"), "ld_scalar_b16": ptx.count("ld.global.b16"),
            "st_v4": ptx.count("st.global.v4"), "st_scalar_b16": ptx.count("st.global.b16"),
            "rsqrt_approx": "rsqrt.approx" in ptx}


if __name__ == "__main__":
    assert not K.interpreted(), "TRITON_INTERPRET must be unset before the kernels are imported"
    variants = {
        "fc bf16 native N3 H4096": lambda: fc_norm_concat("bf16", "bf16", 3, 4096, "native"),
        "fc bf16 one_round N4 H7168": lambda: fc_norm_concat("bf16", "bf16", 4, 7168, "one_round"),
        "fc bf16 fp32-weight N8 H2880": lambda: fc_norm_concat("bf16", "fp32", 8, 2880, "native"),
        "fc fp16 native N3 H4096": lambda: fc_norm_concat("fp16", "fp16", 3, 4096, "native"),
        "fc fp32 native N1 H4096": lambda: fc_norm_concat("fp32", "fp32", 1, 4096, "native"),
        "fused bf16 native H4096": lambda: fused_add("bf16", "bf16", 4096, "native", False),
        "fused bf16 one_round rounded_sum H7168": lambda: fused_add("bf16", "bf16", 7168, "one_round", True),
    }
    for name, build in variants.items():
        print(json.dumps(summary(name, build())), flush=True)
    sys.exit(0)
