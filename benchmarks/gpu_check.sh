#!/usr/bin/env bash
# One-shot GPU check for eagleconv.kernels (issue 9): the kernel tests on CUDA, the recipe check under
# torch.compile and the benchmark table, plus `validate --forward --backend triton --device cuda` when
# that command exists.  Needs torch with CUDA, triton and pytest only (no network, nothing installed).
# Every step runs even if an earlier one fails; the exit status says whether any did.  Outputs go to OUTDIR
# (default: $OUT when set, else benchmarks/gpu-check-<UTC time>/).  Estimated (not yet measured) on an
# H200: tests 1-3 min (one Triton compile per kernel variant), bench 3-5 min (torch.compile is most of it),
# validate ~1 min, simulate ~1-2 min.  Where one command may run at most 10 minutes, run the steps as two commands:
#
#     bash benchmarks/gpu_check.sh [OUTDIR] [STEP ...]     # STEP: tests, bench, validate, simulate (default: all)
#     bash benchmarks/gpu_check.sh "$OUT" tests validate simulate; bash benchmarks/gpu_check.sh "$OUT" bench
#
# simulate (issue 15): `simulate --device cuda` on the tiny pair (and on the SmolLM2 pair when SMOL_PAIR names its
# directory, e.g. carried to the device) must give exactly the tokens, counters and drafts of the CPU run; it
# records both times.  eagleconv's package imports pydantic, which the device image (torch 2.11, triton 3.6,
# transformers) lacks: validate and simulate need it on the PYTHONPATH, e.g. built here with
# `pip install --target benchmarks/.gpu-deps pydantic` for the device's Python and carried (run(carry=[...]));
# this script adds benchmarks/.gpu-deps to PYTHONPATH when it exists and otherwise skips those steps, saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-benchmarks/gpu-check-$(date -u +%Y%m%dT%H%M)}}"
shift || true
steps="${*:-tests bench validate simulate}"
wants() { case " $steps " in *" $1 "*) return 0;; *) return 1;; esac; }
mkdir -p "$out"
unset TRITON_INTERPRET  # compiled kernels, not the CPU interpreter
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -d benchmarks/.gpu-deps ] && export PYTHONPATH="$PYTHONPATH:$PWD/benchmarks/.gpu-deps"
status=0

step() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

step "environment"
env_rc=0
python - > "$out/environment.txt" 2>&1 <<'EOF' || env_rc=$?
import platform, sys
import torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton
    print("triton", triton.__version__)
except ImportError:
    print("triton MISSING"); sys.exit(1)
if not torch.cuda.is_available():
    print("no CUDA device"); sys.exit(1)
p = torch.cuda.get_device_properties(0)
print("gpu", p.name, f"{p.total_memory / 2**30:.0f} GiB", "sm", f"{p.major}.{p.minor}")
from eagleconv import kernels
print("eagleconv.kernels path on cuda:", kernels.path_for("cuda"))
EOF
cat "$out/environment.txt"
[ "$env_rc" = 0 ] || { echo "environment check failed: stopping"; exit 1; }

if wants tests; then
    step "kernel tests on CUDA"
    # --noconftest: tests/kernels/test_kernels.py needs only torch, triton and pytest (the shared conftest imports the
    # whole package); the tests put their tensors on cuda when it is available.
    timeout 300 python -m pytest -q -p no:cacheprovider --noconftest tests/kernels/test_kernels.py \
        tests/benchmarks/test_kernels_script.py 2>&1 | tee "$out/tests.txt" || status=1
fi

if wants bench; then
    step "benchmark (and the torch.compile recipe check)"
    timeout 480 python benchmarks/kernels.py --json "$out/kernels.json" 2>&1 | tee "$out/benchmark.txt" || status=1
fi

if wants validate && ! python -m eagleconv validate --help 2>/dev/null | grep -q -- "--backend"; then
    step "validate skipped: 'python -m eagleconv validate --help' fails or has no --backend (missing dependencies?)"
    status=1
elif wants validate; then
    step "validate --forward --backend triton --device cuda on the EAGLE-3.1 fixtures"
    for fixture in fixtures/specforge-llama-eagle31 fixtures/vllm-qwen3-eagle31 fixtures/torchspec-kimi-mla-eagle31; do
        [ -f "$fixture/config.json" ] || continue
        rc=0
        timeout 120 python -m eagleconv validate "$fixture" --forward --backend triton --device cuda --json \
            > "$out/validate-$(basename "$fixture").json" 2>> "$out/validate.err" || rc=$?
        echo "$fixture: exit $rc"  # 1 = findings (recorded in the JSON); 2 or more = the command failed
        [ "$rc" -le 1 ] || status=1
    done
fi

if wants simulate && ! python -c "import pydantic" 2>/dev/null; then
    step "simulate skipped: no pydantic (eagleconv imports it; carry benchmarks/.gpu-deps, see the header)"
    status=1
elif wants simulate; then
    step "simulate --device cuda against the CPU run (tokens, counters, every draft)"
    timeout 420 python - "$out" <<'EOF' 2>&1 | tee "$out/simulate.txt" || status=1
import json, os, sys, time
from pathlib import Path
from eagleconv.simulation import simulate
out = Path(sys.argv[1])
keys = ("tokens", "drafts", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")
pairs = [("tiny", Path("fixtures/tiny-pair"), "eagle3", 32)]
if os.environ.get("SMOL_PAIR"):
    pairs.append(("smollm2", Path(os.environ["SMOL_PAIR"]), "eagle3", 64))
failed = False
for name, pair, drafter, n in pairs:
    row = {}
    for device in ("cuda", "cpu"):
        start = time.perf_counter()
        report = simulate(pair / drafter, pair / "target", pair / "prompts.json", num_speculative_tokens=3,
                          max_tokens=n, device=device)
        row[device] = {"seconds": round(time.perf_counter() - start, 2), **{k: getattr(report, k) for k in keys}}
    same = all(row["cuda"][k] == row["cpu"][k] for k in keys)
    failed |= not same
    print(f"{name}: cuda {row['cuda']['seconds']} s, cpu {row['cpu']['seconds']} s, identical {'/'.join(keys)}: {same}")
    (out / f"simulate-{name}.json").write_text(json.dumps(row) + "\n")
sys.exit(1 if failed else 0)
EOF
fi

step "done: status $status, results in $out"
exit "$status"
