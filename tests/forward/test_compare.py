"""compare() (the per-step numbers of engine views and `diff`) against a plain boolean-gather implementation."""

from __future__ import annotations

import pytest
import torch

from eagleconv.forward.model import DraftResult
from eagleconv.forward.run import TINY, compare


def _plain(a: list[DraftResult], b: list[DraftResult]) -> tuple[list[tuple[float, float, float]], bool]:
    rows, identical = [], True
    for k in range(len(a[0].logits)):
        agree = total = 0
        max_abs = max_rel = 0.0
        for ra, rb in zip(a, b):
            la = (ra.first_pass_logits if k == 0 else ra.logits[k]).double()
            lb = (rb.first_pass_logits if k == 0 else rb.logits[k]).double()
            agree += int((la.argmax(-1) == lb.argmax(-1)).sum())
            total += la.argmax(-1).numel()
            fa, fb = torch.isfinite(la), torch.isfinite(lb)
            both = fa & fb
            if not torch.equal(fa, fb) or not torch.equal(la[both], lb[both]):
                identical = False
            if bool(both.any()):
                err = (la[both] - lb[both]).abs()
                max_abs = max(max_abs, float(err.max()))
                max_rel = max(max_rel, float((err / la[both].abs().clamp_min(TINY)).max()))
        rows.append((agree / max(1, total), max_abs, max_rel))
    return rows, identical


def _result(first: torch.Tensor, steps: list[torch.Tensor]) -> DraftResult:
    logits = [first[:, -1], *steps]
    return DraftResult([x.argmax(-1) for x in logits], logits, [torch.zeros(first.shape[0], 2) for _ in logits], first)


def _logits(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)
    x[..., ::3] = float("-inf")  # outside the draft vocabulary
    return x


COMPARE_CASES = ["same", "perturbed", "finiteness", "nan", "all_masked", "signed_zero"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("case", COMPARE_CASES)
def test_compare_matches_the_plain_computation(dtype: torch.dtype, case: str) -> None:
    g = torch.Generator().manual_seed(COMPARE_CASES.index(case))  # not hash(): str hashes change per process
    first, steps = _logits(g, (3, 4, 50), dtype), [_logits(g, (3, 50), dtype) for _ in range(2)]
    a = _result(first, steps)
    f2, s2 = first.clone(), [s.clone() for s in steps]
    if case == "perturbed":
        f2[1, 2, 7] += 0.5
        s2[1][2, 10] *= 3
        s2[0][0, 1] = 1e-9  # tiny |a|: the relative error's floor
    elif case == "finiteness":
        f2[0, 0, 0] = 1.0  # -inf in A, finite in B
        s2[0][1, 4] = float("inf")
    elif case == "nan":
        f2[2, 1, 5] = float("nan")
    elif case == "all_masked":
        first.fill_(float("-inf"))
        f2.fill_(float("-inf"))
    elif case == "signed_zero":
        first[0, 0, 1], f2[0, 0, 1] = 0.0, -0.0
    b = _result(f2, s2)
    kept = [x.clone() for x in (a.first_pass_logits, *a.logits, b.first_pass_logits, *b.logits)]
    got, identical = compare([a, b], [b, a])
    now = (a.first_pass_logits, *a.logits, b.first_pass_logits, *b.logits)
    assert all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(now, kept))  # inputs untouched
    want, want_identical = _plain([a, b], [b, a])
    assert [(s.top1_agreement, s.max_abs_err, s.max_rel_err) for s in got] == want
    assert identical == want_identical
    assert identical == (case in ("same", "all_masked", "signed_zero"))
