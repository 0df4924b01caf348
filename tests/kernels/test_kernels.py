"""eagleconv.kernels against a float64 oracle and a literal PyTorch emulation of vLLM's recipes.

Both implementations are checked: the Triton kernels (on CPU through Triton's
interpreter, which conftest.py switches on; on CUDA when there is a GPU) and
the plain-PyTorch fallback.  Every run draws fresh random inputs (the seed is
printed and can be pinned with EAGLECONV_TEST_SEED); outputs are poisoned with
NaN before each run, and written through views into NaN-padded buffers, so an
unwritten element or a write outside the output fails.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from eagleconv import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TRITON_RUNS = kernels.triton_available() and kernels.path_for(DEVICE) != "torch"
if TRITON_RUNS:
    import triton
    import triton.language as tl

    from eagleconv.kernels._triton import _rne_bf16

    @triton.jit
    def _cast_kernel(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + offs, _rne_bf16(tl.load(X + offs, mask=offs < n)), mask=offs < n)

IMPLS = [pytest.param("triton", marks=pytest.mark.skipif(not TRITON_RUNS, reason="Triton (or its interpreter) unavailable")),
         "torch"]

# kernels.md §9: relative tolerance against float64 per (dtype, recipe), and atol.
RTOL = {
    (torch.bfloat16, "native"): 8e-3, (torch.bfloat16, "one_round"): 4e-3,
    (torch.float16, "native"): 1e-3, (torch.float16, "one_round"): 5e-4,
    (torch.float32, "native"): 1e-5, (torch.float32, "one_round"): 1e-5,
}
ATOL = {torch.bfloat16: 1e-6, torch.float16: 1e-7, torch.float32: 1e-6}
BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}

# (T, N, H): odd token counts, H not a power of two (40: tiny drafter; 2880: gpt-oss; 7168: DeepSeek/Kimi).
SHAPES = [(1, 3, 40), (37, 4, 2880), (5, 3, 7168)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture
def gen() -> torch.Generator:
    seed = int(os.environ.get("EAGLECONV_TEST_SEED", random.SystemRandom().randrange(2**31)))
    print(f"EAGLECONV_TEST_SEED={seed}")
    return torch.Generator().manual_seed(seed)


# ---- oracle and emulation (written here, independently of eagleconv.kernels._torch) ----

def oracle(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """float64 RMSNorm of the same quantized inputs: the only errors left are the kernel's roundings."""
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def vllm_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, recipe: str) -> torch.Tensor:
    """vllm/ir/ops/layernorm.py rms_norm (native), or csrc's one-round output, on CPU torch."""
    orig = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    if recipe == "native":
        return (x.to(w.dtype) * w).to(orig)
    return (x * w.to(torch.float32)).to(orig)


def vllm_fused_add(x, residual, w, eps, recipe):
    orig = x.dtype
    s = x.to(torch.float32) + residual.to(torch.float32)
    return vllm_rms_norm(s, w, eps, recipe).to(orig), s.to(orig)


def ordered(t: torch.Tensor) -> torch.Tensor:
    """Sign-magnitude float bits as integers in value order, so |a - b| counts ulps."""
    bits = t.contiguous().view(BITS[t.dtype]).to(torch.int64)
    mag = bits & (0x7FFF if t.dtype != torch.float32 else 0x7FFFFFFF)
    return torch.where(bits < 0, -mag, mag)


def assert_band(out, ref64, dtype, recipe, what):
    rtol, atol = RTOL[(dtype, recipe)], ATOL[dtype]
    err = (out.double() - ref64).abs()
    bad = err > atol + rtol * ref64.abs()
    assert not bad.any(), (f"{what}: {int(bad.sum())}/{out.numel()} elements outside rtol {rtol} atol {atol} of the "
                           f"float64 reference; worst rel err {float((err / ref64.abs().clamp_min(1e-30)).max()):.3g}")


def rounding_on_a_tie(x, w, eps, recipe, out_dtype=None, rel=4e-6):
    """Where a rounding of a value that depends on the fp32 reduction sits within its noise of a tie: a different
    summation order may round it the other way.  That is the native recipe's first rounding (x*rstd -> weight
    dtype; the weight multiply can stretch that 1-ulp flip to 2 ulp of the output), and the single output
    rounding where it takes x*rstd*w straight from fp32 (one_round, or fp32 weights).  Low-precision outputs
    only: an fp32 output is compared with a tolerance."""
    out_dtype = out_dtype or x.dtype
    y = x.to(torch.float32)
    y = y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + eps)
    if out_dtype == torch.float32:
        return torch.zeros_like(y, dtype=torch.bool)
    if recipe == "native" and w.dtype != torch.float32:
        return (y * (1 - rel)).to(w.dtype) != (y * (1 + rel)).to(w.dtype)
    v = y * w.to(torch.float32)
    return (v * (1 - rel)).to(out_dtype) != (v * (1 + rel)).to(out_dtype)


def assert_same_bits(out, emu, what, ties=None, min_identical=0.999):
    """>= 99.9% of the elements off a rounding tie bit-identical to the emulation, every element at most 1 ulp
    off (2 ulp only on ``ties``, see above).  Tie elements may flip with the summation order, so they are left
    out of the fraction: one flip in a 40-element block would otherwise be 2.5%."""
    ulps = (ordered(out) - ordered(emu)).abs()
    judged = ulps if ties is None else ulps[~ties]
    identical = float((judged == 0).double().mean()) if judged.numel() else 1.0
    limit = torch.ones_like(ulps) if ties is None else 1 + ties.to(ulps.dtype)
    over = ulps > limit
    assert identical >= min_identical and not over.any(), (
        f"{what}: {identical:.5%} bit-identical to the emulation (need >= {min_identical:.1%}), max "
        f"{int(ulps.max())} ulp, {int(over.sum())} elements beyond 1 ulp off a rounding tie")


def make_aux(gen, tokens, n, hidden, dtype):
    """[T, N*H] aux states with massive-activation channels, an all-zero row and (fp16) values near 6e4."""
    x = torch.randn(tokens, n * hidden, generator=gen)
    channels = torch.randint(0, n * hidden, (4 * n,), generator=gen)
    x[:, channels] *= 300.0
    if tokens > 2:
        x[1] = 0.0
        if dtype == torch.float16:
            x[2] = x[2] / x[2].abs().max() * 6.0e4  # the fp32 sum of squares must not overflow
    return x.to(dtype)


def make_weights(gen, n, hidden, dtype):
    return [(1.0 + 0.5 * torch.randn(hidden, generator=gen)).to(dtype) for _ in range(n)]


def poisoned_view(tokens, width, dtype, pad=3):
    """A NaN buffer with padding rows/columns around a [tokens, width] view: writes outside it stay visible."""
    buf = torch.full((tokens + 2 * pad, width + 2 * pad), float("nan"), dtype=dtype, device=DEVICE)
    return buf, buf[pad:pad + tokens, pad:pad + width]


def assert_padding_untouched(buf, pad=3):
    inner = torch.zeros_like(buf, dtype=torch.bool)
    inner[pad:buf.shape[0] - pad, pad:buf.shape[1] - pad] = True
    assert buf[~inner].isnan().all(), "the kernel wrote outside its output"


def weight_dtypes(dtype):
    return [dtype] if dtype == torch.float32 else [dtype, torch.float32]


CASES = [(shape, dtype, wdtype, recipe) for shape in SHAPES for dtype in DTYPES for wdtype in weight_dtypes(dtype)
         for recipe in kernels.RECIPES]


def case_id(case):
    (tokens, n, hidden), dtype, wdtype, recipe = case
    return f"T{tokens}-N{n}-H{hidden}-{str(dtype)[6:]}-w{str(wdtype)[6:]}-{recipe}"


# ---- fc_norm_concat ----

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_fc_norm_concat(impl, case, gen):
    (tokens, n, hidden), dtype, wdtype, recipe = case
    eps = random.choice([1e-5, 1e-6])
    buf = make_aux(gen, tokens, n, hidden, dtype).to(DEVICE)
    weights = [w.to(DEVICE) for w in make_weights(gen, n, hidden, wdtype)]
    # Chunk views of one [T, N*H] buffer (how an engine holds the aux states), or a separate list.
    xs = list(buf.chunk(n, dim=-1))
    if recipe == "one_round":
        xs = [x.contiguous() for x in xs]
    padded, out = poisoned_view(tokens, n * hidden, dtype)
    result = kernels.fc_norm_concat(xs, weights, eps, recipe, out=out, impl=impl)
    assert result.data_ptr() == out.data_ptr() and result.dtype == dtype
    assert_padding_untouched(padded)
    assert not out.isnan().any(), "unwritten (poisoned) elements in the output"
    what = f"{impl} {case_id(case)} eps={eps}"
    for g in range(n):
        block = out[:, g * hidden:(g + 1) * hidden].cpu()
        x, w = xs[g].cpu(), weights[g].cpu()
        assert_band(block, oracle(x, w, eps), dtype, recipe, f"{what} block {g}")
        emu = vllm_rms_norm(x, w, eps, recipe)
        if dtype == torch.float32:
            torch.testing.assert_close(block, emu, rtol=2e-6, atol=1e-6, msg=what)
        else:
            # bf16 (the interpreter-sensitive case) and fp16: the same recipe up to reduction order.
            assert_same_bits(block, emu, f"{what} block {g}", rounding_on_a_tie(x, w, eps, recipe))
    if tokens > 2:
        assert (out[1] == 0).all(), "an all-zero row must normalise to zeros"


@pytest.mark.parametrize("impl", IMPLS)
def test_default_allocation_is_fully_written(impl, gen, monkeypatch):
    """Without out=, the kernels own the allocation: poison it and check every element was written."""
    monkeypatch.setattr(kernels, "_alloc",
                        lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype, device=device))
    tokens, n, hidden = 9, 3, 1000
    buf = make_aux(gen, tokens, n, hidden, torch.bfloat16).to(DEVICE)
    weights = [w.to(DEVICE) for w in make_weights(gen, n, hidden, torch.bfloat16)]
    out = kernels.fc_norm_concat(buf.chunk(n, -1), weights, 1e-5, impl=impl)
    assert out.shape == (tokens, n * hidden) and not out.isnan().any()
    y, r = kernels.fused_add_rms_norm(buf[:, :hidden], buf[:, hidden:2 * hidden], weights[0], 1e-5, impl=impl)
    assert not y.isnan().any() and not r.isnan().any()


@pytest.mark.parametrize("impl", IMPLS)
def test_more_inputs_than_pointers_and_leading_dims(impl, gen):
    """N=9 takes two launches (8 base pointers per launch); [B, S, H] inputs keep their leading dims."""
    n, hidden = 9, 48
    xs = [torch.randn(2, 3, hidden, generator=gen).to(torch.bfloat16).to(DEVICE) for _ in range(n)]
    weights = torch.stack(make_weights(gen, n, hidden, torch.bfloat16)).to(DEVICE)  # one [N, H] tensor
    out = kernels.fc_norm_concat(xs, weights, 1e-6, "native", impl=impl)
    assert out.shape == (2, 3, n * hidden)
    emu = torch.cat([vllm_rms_norm(x.cpu(), w.cpu(), 1e-6, "native") for x, w in zip(xs, weights)], -1)
    ties = torch.cat([rounding_on_a_tie(x.cpu(), w.cpu(), 1e-6, "native") for x, w in zip(xs, weights)], -1)
    assert_same_bits(out.cpu(), emu, "N=9", ties)


@pytest.mark.parametrize("impl", IMPLS)
def test_rms_norm_is_fc_norm_with_one_input(impl, gen):
    x = (torch.randn(37, 2880, generator=gen) * 3).to(torch.bfloat16).to(DEVICE)
    w = make_weights(gen, 1, 2880, torch.bfloat16)[0].to(DEVICE)
    for recipe in kernels.RECIPES:
        y = kernels.rms_norm(x, w, 1e-5, recipe, impl=impl)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert_band(y.cpu(), oracle(x.cpu(), w.cpu(), 1e-5), torch.bfloat16, recipe, recipe)
        assert_same_bits(y.cpu(), vllm_rms_norm(x.cpu(), w.cpu(), 1e-5, recipe), recipe,
                         rounding_on_a_tie(x.cpu(), w.cpu(), 1e-5, recipe))


def test_recipes_differ_by_one_ulp_on_many_elements(gen):
    """The recipe is a real choice: in bf16 about a quarter of elements differ, each by exactly 1 ulp (§1.5)."""
    x = make_aux(gen, 64, 1, 4096, torch.bfloat16).to(DEVICE)
    w = make_weights(gen, 1, 4096, torch.bfloat16)[0].to(DEVICE)
    native = kernels.rms_norm(x, w, 1e-5, "native")
    one_round = kernels.rms_norm(x, w, 1e-5, "one_round")
    ulps = (ordered(native.cpu()) - ordered(one_round.cpu())).abs()
    assert 0.15 < float((ulps > 0).double().mean()) < 0.35 and int(ulps.max()) == 1


# ---- fused_add_rms_norm ----

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", [c for c in CASES if c[0][1] == 3], ids=case_id)
def test_fused_add_rms_norm(impl, case, gen):
    (tokens, _, hidden), dtype, wdtype, recipe = case
    eps = 1e-6
    pair = make_aux(gen, tokens, 2, hidden, dtype).to(DEVICE)
    x, residual = pair[:, :hidden], pair[:, hidden:]  # strided views
    w = make_weights(gen, 1, hidden, wdtype)[0].to(DEVICE)
    before = pair.clone()
    pad_out, out = poisoned_view(tokens, hidden, dtype)
    pad_res, res = poisoned_view(tokens, hidden, dtype)
    y, new_res = kernels.fused_add_rms_norm(x, residual, w, eps, recipe, out=out, residual_out=res, impl=impl)
    assert y.data_ptr() == out.data_ptr() and new_res.data_ptr() == res.data_ptr()
    assert torch.equal(pair, before), "the inputs must not be modified"
    assert_padding_untouched(pad_out)
    assert_padding_untouched(pad_res)
    assert not out.isnan().any() and not res.isnan().any(), "unwritten (poisoned) elements"
    what = f"{impl} {case_id(case)}"
    xc, rc, wc = x.cpu(), residual.cpu(), w.cpu()
    emu_y, emu_res = vllm_fused_add(xc, rc, wc, eps, recipe)
    assert torch.equal(res.cpu(), emu_res), f"{what}: new residual is not the fp32 sum rounded once"
    # The oracle normalises the float64 sum: the variance must come from the unrounded sum.
    assert_band(out.cpu(), oracle(xc.double() + rc.double(), wc, eps), dtype, recipe, what)
    if dtype == torch.float32:
        torch.testing.assert_close(out.cpu(), emu_y, rtol=2e-6, atol=1e-6, msg=what)
    else:
        assert_same_bits(out.cpu(), emu_y, what, rounding_on_a_tie(xc.float() + rc.float(), wc, eps, recipe, dtype))


@pytest.mark.parametrize("impl", IMPLS)
def test_fused_add_variance_from_the_rounded_sum(impl, gen):
    """variance_from="rounded_sum" is vllm_c's fused add (issue #52104): norm of the bf16-rounded residual."""
    tokens, hidden = 37, 2880
    pair = make_aux(gen, tokens, 2, hidden, torch.bfloat16).to(DEVICE)
    x, residual = pair[:, :hidden], pair[:, hidden:]
    w = make_weights(gen, 1, hidden, torch.bfloat16)[0].to(DEVICE)
    for recipe in kernels.RECIPES:
        y, res = kernels.fused_add_rms_norm(x, residual, w, 1e-6, recipe, variance_from="rounded_sum", impl=impl)
        native_y, native_res = kernels.fused_add_rms_norm(x, residual, w, 1e-6, recipe, impl=impl)
        rounded = (x.cpu().float() + residual.cpu().float()).to(torch.bfloat16)
        assert torch.equal(res.cpu(), rounded) and torch.equal(native_res, res)
        assert_same_bits(y.cpu(), vllm_rms_norm(rounded, w.cpu(), 1e-6, recipe), f"{impl} rounded_sum {recipe}",
                         rounding_on_a_tie(rounded, w.cpu(), 1e-6, recipe))
        assert float((y != native_y).double().mean()) > 0.01, "the variance source made no difference"


# ---- the bf16 rounding helper, the API's edges, Triton being optional ----

@pytest.mark.skipif(not TRITON_RUNS, reason="Triton (or its interpreter) unavailable")
def test_rne_bf16_helper_rounds_like_torch(gen):
    """The integer round-to-nearest-even replaces the interpreter's truncating cast: bit-exact with torch,
    including ties, subnormals, infinities, overflow to inf and NaN."""
    bits = torch.randint(-2**31, 2**31 - 1, (1 << 16,), generator=gen, dtype=torch.int64)
    bits[:4096] = (bits[:4096] & ~0xFFFF) | 0x8000  # exact ties: round to even
    bits[4096:8192] &= 0x807FFFFF  # subnormals
    x = bits.to(torch.int32).view(torch.float32)
    x = torch.cat([x, torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 3.3961e38, -3.3961e38])])
    x = x.to(DEVICE)
    y = torch.empty(x.shape, dtype=torch.bfloat16, device=DEVICE)
    _cast_kernel[(triton.cdiv(x.numel(), 8192),)](x, y, x.numel(), BLOCK=8192)
    expected = x.to(torch.bfloat16)
    nan = expected.isnan()
    assert torch.equal(y.isnan(), nan)
    assert torch.equal(y[~nan].view(torch.int16), expected[~nan].view(torch.int16))


@pytest.mark.skipif(not kernels.triton_available(), reason="Triton not installed")
def test_kernels_compile_for_hopper_without_a_gpu():
    """Compile every kernel variant for sm_90 with Triton's bundled ptxas (tests/kernels/kernels_aot.py): catches code
    the interpreter accepts but the GPU compiler rejects, and checks the bf16 rows still load and store as
    128-bit vectors (the kernels are bandwidth-bound)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("kernels_aot.py"))], capture_output=True,
                          text=True, env=env, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 7
    for row in rows:
        assert row["rsqrt_approx"], row
        if row["variant"].startswith(("fc bf16", "fc fp16", "fused bf16")):
            assert row["ld_v4"] > 0 and row["st_v4"] > 0 and row["ld_scalar_b16"] == 0 and row["st_scalar_b16"] == 0, row


def test_empty_and_invalid_inputs():
    x = torch.zeros(0, 16, dtype=torch.bfloat16, device=DEVICE)
    w = torch.ones(16, dtype=torch.bfloat16, device=DEVICE)
    assert kernels.fc_norm_concat([x, x, x], [w, w, w], 1e-5).shape == (0, 48)
    y, r = kernels.fused_add_rms_norm(x, x, w, 1e-5)
    assert y.shape == r.shape == (0, 16)
    x = torch.ones(2, 16, device=DEVICE)
    with pytest.raises(ValueError, match="recipe"):
        kernels.rms_norm(x, w.float(), 1e-5, "round_first")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"weights\[1\]: shape \(8,\)"):
        kernels.fc_norm_concat([x, x], [w.float(), w[:8].float()], 1e-5)
    with pytest.raises(ValueError, match=r"xs\[1\]"):
        kernels.fc_norm_concat([x, x[:, :8]], [w.float(), w.float()], 1e-5)
    with pytest.raises(ValueError, match="2 inputs but 1 weights"):
        kernels.fc_norm_concat([x, x], [w.float()], 1e-5)
    with pytest.raises(TypeError, match="int64"):
        kernels.rms_norm(x.long(), w, 1e-5)
    with pytest.raises(ValueError, match="out: expected shape"):
        kernels.fc_norm_concat([x, x], [w, w], 1e-5, out=torch.empty(2, 33, device=DEVICE))


def test_kernels_are_optional(tmp_path):
    """Without Triton, eagleconv installs and runs, the kernels take the torch path with the same results,
    and asking for Triton explicitly says how to get it."""
    pytest.importorskip("click")  # benchmarks/gpu_check.sh runs this file where only torch and triton may exist
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # as if Triton were not installed
        import torch
        from click.testing import CliRunner
        from eagleconv.cli.main import cli
        from eagleconv import kernels
        assert CliRunner().invoke(cli, ["--help"]).exit_code == 0
        assert not kernels.triton_available() and kernels.path_for("cpu") == "torch"
        x = torch.randn(5, 3 * 40).to(torch.bfloat16); w = [torch.ones(40, dtype=torch.bfloat16)] * 3
        ref = torch.cat([kernels.rms_norm(c, w[0], 1e-5, impl="torch") for c in x.chunk(3, -1)], -1)
        assert torch.equal(kernels.fc_norm_concat(x.chunk(3, -1), w, 1e-5), ref)
        try:
            kernels.rms_norm(x, torch.ones(120), 1e-5, impl="triton")
        except kernels.KernelUnavailable as exc:
            print(exc)
        else:
            raise SystemExit("impl='triton' ran without Triton")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'eagleconv[kernels]'" in proc.stdout
