"""Triton kernels behind eagleconv.kernels (imported only when Triton is installed and a kernel runs).

Design (after TensorRT-LLM group_rms_norm and Liger rms_norm): one program normalises ``ROWS`` rows of
one input ``g``; the grid is ``(cdiv(T, ROWS), N)``, so N RMSNorms and their
concatenation are one launch, each program writing straight into column block
``g*H`` of the output.  All arithmetic is fp32; every rounding to bf16 goes
through an integer round-to-nearest-even, because Triton's CPU interpreter
truncates fp32 -> bf16 casts (the GPU's ``cvt.rn`` rounds the same way as the
helper, so interpreter and GPU agree).  Up to ``MAX_INPUTS`` inputs travel as
separate base pointers with their own row strides, so the aux list, or chunk
views of one ``[T, N*H]`` buffer, are read in place with no cat.
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from torch import Tensor

MAX_INPUTS = 8
MAX_BLOCK_H = 65536


@triton.jit
def _rne_bf16(x):
    """fp32 -> bf16, round to nearest even; NaN stays NaN (the interpreter's own cast truncates)."""
    bits = x.to(tl.uint32, bitcast=True)
    r = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    r = tl.where(x != x, (bits >> 16) | 0x40, r)
    return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _round_to(y, DT: tl.constexpr):
    """Round fp32 ``y`` to dtype ``DT`` (RNE) and return it as fp32 again."""
    if DT == tl.bfloat16:
        return _rne_bf16(y).to(tl.float32)
    elif DT == tl.float16:
        return y.to(tl.float16).to(tl.float32)
    else:
        return y


@triton.jit
def _store_rounded(ptr, y, mask, DT: tl.constexpr):
    if DT == tl.bfloat16:
        tl.store(ptr, _rne_bf16(y), mask=mask)
    else:
        tl.store(ptr, y.to(DT), mask=mask)


@triton.jit
def _scale(x, w, rstd, ROUND_FIRST: tl.constexpr, WDT: tl.constexpr):
    """x * rstd * w in fp32 with the recipe's intermediate roundings (the final one is the store's)."""
    y = x * rstd[:, None]
    if ROUND_FIRST:
        # vLLM native: (x*rstd).to(w.dtype) * w, the product rounded in w.dtype, then cast to the output dtype.
        y = _round_to(_round_to(y, WDT) * w[None, :], WDT)
    else:
        y = y * w[None, :]
    return y


@triton.jit
def _fc_norm_concat_kernel(
    X0, X1, X2, X3, X4, X5, X6, X7,
    S0, S1, S2, S3, S4, S5, S6, S7,
    W0, W1, W2, W3, W4, W5, W6, W7,
    Y, stride_y, T, H, eps,
    N: tl.constexpr, BLOCK_H: tl.constexpr, ROWS: tl.constexpr, ROUND_FIRST: tl.constexpr,
):
    g = tl.program_id(1)
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    col_ok = cols < H
    mask = (rows < T)[:, None] & col_ok[None, :]
    r64 = rows.to(tl.int64)[:, None]
    # Pick input g's pointers.  The chain is unrolled at compile time up to N; only one branch runs.
    x_ptr = X0
    w_ptr = W0
    stride = S0
    if N > 1:
        if g == 1:
            x_ptr = X1
            w_ptr = W1
            stride = S1
    if N > 2:
        if g == 2:
            x_ptr = X2
            w_ptr = W2
            stride = S2
    if N > 3:
        if g == 3:
            x_ptr = X3
            w_ptr = W3
            stride = S3
    if N > 4:
        if g == 4:
            x_ptr = X4
            w_ptr = W4
            stride = S4
    if N > 5:
        if g == 5:
            x_ptr = X5
            w_ptr = W5
            stride = S5
    if N > 6:
        if g == 6:
            x_ptr = X6
            w_ptr = W6
            stride = S6
    if N > 7:
        if g == 7:
            x_ptr = X7
            w_ptr = W7
            stride = S7
    x = tl.load(x_ptr + r64 * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / H + eps)
    y = _scale(x, w, rstd, ROUND_FIRST, W0.dtype.element_ty)
    _store_rounded(Y + r64 * stride_y + g * H + cols[None, :], y, mask, Y.dtype.element_ty)


@triton.jit
def _fused_add_rms_norm_kernel(
    X, stride_x, R, stride_r, W, Y, stride_y, RO, stride_ro, T, H, eps,
    BLOCK_H: tl.constexpr, ROWS: tl.constexpr, ROUND_FIRST: tl.constexpr, ROUNDED_SUM: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    col_ok = cols < H
    mask = (rows < T)[:, None] & col_ok[None, :]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(X + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + r64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s = x + r
    # The residual goes out rounded once; the variance comes from the unrounded fp32 sum (vLLM native),
    # or, ROUNDED_SUM, from the rounded one (vllm_c's packed add, issue #52104).
    _store_rounded(RO + r64 * stride_ro + cols[None, :], s, mask, RO.dtype.element_ty)
    if ROUNDED_SUM:
        s = _round_to(s, RO.dtype.element_ty)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(s * s, axis=1) / H + eps)
    y = _scale(s, w, rstd, ROUND_FIRST, W.dtype.element_ty)
    _store_rounded(Y + r64 * stride_y + cols[None, :], y, mask, Y.dtype.element_ty)


@functools.cache
def interpreted() -> bool:
    """True when the kernels were decorated under TRITON_INTERPRET=1 (they then run on the CPU)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_fc_norm_concat_kernel, InterpretedFunction)


def _tiling(hidden: int) -> tuple[int, int, int]:
    """(BLOCK_H, ROWS, num_warps) for a row length: one tile per row block, Liger's warp ladder."""
    block_h = triton.next_power_of_2(hidden)
    if block_h > MAX_BLOCK_H:
        raise ValueError(f"hidden size {hidden} exceeds the Triton kernels' single-tile limit {MAX_BLOCK_H}")
    if interpreted():
        # Each program costs ~10 ms in the interpreter whatever its size: few, large programs.
        return block_h, max(1, min(64, 65536 // block_h)), 4
    rows = max(1, min(16, 8192 // block_h))
    num_warps = 4 if block_h < 2048 else 8 if block_h < 8192 else 16
    return block_h, rows, num_warps


def fc_norm_concat(xs: list[Tensor], weights: list[Tensor], eps: float, recipe: str, out: Tensor) -> None:
    """Launch the fused kernel; inputs are 2-D with unit column stride (the caller checked)."""
    n = len(xs)
    tokens, hidden = xs[0].shape
    block_h, rows, num_warps = _tiling(hidden)
    for start in range(0, n, MAX_INPUTS):  # one launch for N <= MAX_INPUTS
        group = range(start, min(n, start + MAX_INPUTS))
        pad = MAX_INPUTS - len(group)
        x_args = [xs[i] for i in group] + [xs[group[0]]] * pad
        s_args = [xs[i].stride(0) for i in group] + [xs[group[0]].stride(0)] * pad
        w_args = [weights[i] for i in group] + [weights[group[0]]] * pad
        y = out[:, start * hidden:]
        grid = (triton.cdiv(tokens, rows), len(group))
        _fc_norm_concat_kernel[grid](
            *x_args, *s_args, *w_args, y, out.stride(0), tokens, hidden, float(eps),
            N=len(group), BLOCK_H=block_h, ROWS=rows, ROUND_FIRST=recipe == "native", num_warps=num_warps,
        )


def fused_add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, eps: float, recipe: str,
                       out: Tensor, residual_out: Tensor, rounded_sum: bool) -> None:
    tokens, hidden = x.shape
    block_h, rows, num_warps = _tiling(hidden)
    _fused_add_rms_norm_kernel[(triton.cdiv(tokens, rows),)](
        x, x.stride(0), residual, residual.stride(0), w, out, out.stride(0), residual_out, residual_out.stride(0),
        tokens, hidden, float(eps), BLOCK_H=block_h, ROWS=rows, ROUND_FIRST=recipe == "native", ROUNDED_SUM=rounded_sum,
        num_warps=num_warps,
    )
