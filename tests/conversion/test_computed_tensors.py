"""A transform's computed tensors go through the one writer, beside the bytes it copies; a plain convert stays exact."""

from __future__ import annotations


import torch
from safetensors.torch import load_file

from eagleconv.conversion import convert
from eagleconv.conversion.transform import Computed, Transform
from eagleconv.io.torch_tensors import tensor_bytes
from eagleconv.spec.report import StepDivergence


def test_a_transform_writes_computed_tensors_beside_copied_bytes(drafter, tmp_path):
    src = drafter(producer="vllm")
    original = load_file(str(src / "model.safetensors"))
    doubled = original["norm.weight"].float() * 2

    def double_norm(loaded) -> Transform:
        dtype, shape, data = tensor_bytes(doubled.to(torch.bfloat16))
        return Transform("test", loaded.require_spec(), computed={"norm.weight": Computed("norm.weight", dtype, shape, data,
                                                                                          "doubled")},
                         removed={"t2d": "not needed"}, exact=False,
                         divergence=[StepDivergence(step=1, top1_agreement=0.5, max_abs_err=1.0, max_rel_err=0.1)])

    report = convert(src, tmp_path / "out", None, transform=double_norm)
    rows = {r.destination or r.source: r for r in report.plan}
    assert rows["norm.weight"].action == "computed" and rows["norm.weight"].reason == "doubled"
    assert rows["t2d"].action == "drop"
    assert rows["fc.weight"].action == "copy"
    assert report.exact is False and report.divergence[0].top1_agreement == 0.5
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert torch.equal(written["norm.weight"], doubled.to(torch.bfloat16))
    assert "t2d" not in written
    for name, tensor in original.items():
        if name not in ("norm.weight", "t2d"):
            assert torch.equal(written[name], tensor), name
    # a plain convert is exact and reports no divergence
    plain = convert(src, tmp_path / "plain", "specforge")
    assert plain.exact is True and plain.divergence == [] and {r.action for r in plain.plan} <= {"copy", "drop", "derive"}
