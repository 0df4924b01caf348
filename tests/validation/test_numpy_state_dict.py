"""A core user's numpy state dict (issue 27 item 10): the library's validate takes numpy arrays as well as torch
tensors, in the core install (torch hidden), with the same findings as the checkpoint on disk."""

from __future__ import annotations

import json
from pathlib import Path

from tests.packaging.test_core_install import BLOCKED, child

REPO = Path(__file__).resolve().parents[2]
EAGLE31 = REPO / "fixtures" / "tiny-pair" / "eagle31"

CODE = f"""
import json
import numpy as np
from safetensors.numpy import load_file
import eagleconv
from eagleconv.errors import FormatError

source = {str(EAGLE31)!r}
state = load_file(source + "/model.safetensors")
config = json.load(open(source + "/config.json"))
out = {{"numpy": eagleconv.validate(state, config=config).model_dump(mode="json"),
        "disk": eagleconv.validate(source).model_dump(mode="json")}}
big_endian = {{k: v.astype(v.dtype.newbyteorder(">")) for k, v in state.items()}}
out["big_endian"] = eagleconv.validate(big_endian, config=config).model_dump(mode="json")
try:
    eagleconv.validate({{**state, "extra": [1, 2]}}, config=config)
except FormatError as exc:
    out["list"] = str(exc)
print(json.dumps(out))
"""


def _findings(report: dict) -> list[tuple[str, str]]:
    return [(f["code"], f["message"]) for f in report["findings"]]


def test_validate_takes_a_numpy_state_dict_without_torch(tmp_path):
    proc = child(BLOCKED, "--python", CODE, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["numpy"]["ok"] and out["disk"]["ok"]
    assert _findings(out["numpy"]) == _findings(out["disk"]) != []  # the numeric scan (EC062) read the same values
    assert _findings(out["big_endian"]) == _findings(out["disk"])
    assert out["list"] == "tensor 'extra' is a list, not a torch tensor or a numpy array"
