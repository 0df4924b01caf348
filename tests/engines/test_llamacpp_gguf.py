"""validate --engine llama.cpp on a GGUF drafter: what llama.cpp b11434's loader and first draft need from the file.

Each variant is a real GGUF (the committed tiny pair's eagle3, converted, then one field broken with the `gguf`
package).  Where a cached llama.cpp build and the SmolLM2 pair exist, the same edits on SmolLM2's eagle3 GGUF run
through real ``llama-speculative-simple``: every variant validate says fails must fail there and every variant it
passes must run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import eagleconv  # noqa: E402
from eagleconv.conversion import convert  # noqa: E402
from eagleconv.engines import resolve_engines  # noqa: E402
from tests.formats.test_gguf import target_for  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
LABEL = "llama.cpp b11434"
V = gguf.GGUFValueType


def rewrite(src: Path, dst: Path, *, drop_keys: tuple[str, ...] = (), set_keys: dict[str, tuple[Any, ...]] | None = None,
            drop_tensors: tuple[str, ...] = (), add: dict[str, np.ndarray] | None = None,
            edit: Callable[[str, np.ndarray], np.ndarray] | None = None) -> Path:
    """``src`` rewritten by gguf's own reader and writer with keys dropped/set and tensors dropped/added/edited."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, str(r.fields["general.architecture"].contents()))
    set_keys = set_keys or {}
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop_keys or name in set_keys:
            continue
        sub = {"sub_type": field.types[-1]} if field.types[0] == V.ARRAY else {}
        w.add_key_value(name, field.contents(), field.types[0], **sub)
    for name, (value, vtype, *sub_type) in set_keys.items():
        w.add_key_value(name, value, vtype, **({"sub_type": sub_type[0]} if sub_type else {}))
    for t in r.tensors:
        if t.name not in drop_tensors:
            data = np.array(t.data)
            w.add_tensor(t.name, edit(t.name, data) if edit is not None else data)
    for name, data in (add or {}).items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def variants(hidden: int, target_hidden: int, n_layers: int, ids: list[int]) -> dict[str, dict[str, Any]]:
    """name -> (rewrite arguments, the llama.cpp finding code that says it does not run; None: it runs)."""
    enc = 3 * target_hidden
    return {
        "clean": dict(code=None),
        "no target_layers": dict(drop_keys=("eagle3.target_layers",), code="EC010"),
        "4 target_layers": dict(set_keys={"eagle3.target_layers": ([*ids, ids[-1]], V.ARRAY, V.INT32)}, code="EC011"),
        "id past the target": dict(set_keys={"eagle3.target_layers": ([*ids[:2], n_layers + 1], V.ARRAY, V.INT32)},
                                   code="EC013"),
        "id = n_layer (final state)": dict(set_keys={"eagle3.target_layers": ([*ids[:2], n_layers], V.ARRAY, V.INT32)},
                                           code=None),
        "target_layers as u32": dict(set_keys={"eagle3.target_layers": (ids, V.ARRAY, V.UINT32)}, code=None),
        "no target_hidden_size": dict(drop_keys=("eagle3.target_hidden_size",), code="EC004"),
        "no rms eps": dict(drop_keys=("eagle3.attention.layer_norm_rms_epsilon",), code="EC004"),
        "target_hidden_size not the target's": dict(
            set_keys={"eagle3.target_hidden_size": (target_hidden - 64, V.UINT32)},
            edit=lambda n, d: np.ascontiguousarray(d[:, :enc - 192]) if n == "fc.weight" else d, code="EC052"),
        "fc not 3 x target_hidden_size": dict(set_keys={"eagle3.target_hidden_size": (target_hidden - 64, V.UINT32)},
                                              code="EC050"),
        "norm_before_fc without its norm": dict(set_keys={"eagle3.norm_before_fc": (True, V.BOOL)}, code="EC021"),
        "enc.output_norm without norm_before_fc": dict(add={"enc.output_norm.weight": np.ones(enc, np.float32)},
                                                       code="EC021"),
        "norm_before_fc with its norm": dict(set_keys={"eagle3.norm_before_fc": (True, V.BOOL)},
                                             add={"enc.output_norm.weight": np.ones(enc, np.float32)}, code=None),
        "d2t as I32": dict(edit=lambda n, d: d.astype(np.int32) if n == "d2t" else d, code="EC030"),
        "no d2t": dict(drop_tensors=("d2t",), code="EC050"),
        "no output with d2t": dict(drop_tensors=("output.weight",), code="EC050"),
        "an extra tensor": dict(add={"t2d": np.zeros(8, np.int8)}, code="EC003"),
        "a layer tensor missing": dict(drop_tensors=("blk.0.attn_norm_2.weight",), code="EC003"),
        "block_count 2": dict(set_keys={"eagle3.block_count": (2, V.UINT32)}, code="EC003"),
        "fc as F16": dict(edit=lambda n, d: d.astype(np.float16) if n == "fc.weight" else d, code=None),
    }


def llamacpp_findings(path: Path, target: Path) -> list[Any]:
    report = eagleconv.validate(path, engines=("llama.cpp",), target=target, numeric=False)
    return [f for f in report.findings if f.engine == LABEL]


TINY = variants(hidden=256, target_hidden=256, n_layers=4, ids=[1, 2, 3])


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-gguf")
    src = PAIR / "eagle3"
    convert(src, out / "eagle3.gguf", "gguf", target=target_for(src, out))
    return out / "eagle3.gguf"


@pytest.mark.parametrize("name", list(TINY))
def test_each_broken_field_is_what_llamacpp_fails_on(name: str, tiny_gguf: Path, tmp_path: Path) -> None:
    args = dict(TINY[name])
    code = args.pop("code")
    found = llamacpp_findings(rewrite(tiny_gguf, tmp_path / "v.gguf", **args), PAIR / "target")
    fails = {f.code for f in found if f.severity == "error" and f.effect == "load_fails"}
    if code is None:
        assert not fails, [f.message for f in found]
    else:
        assert code in fails, [f.message for f in found]
        assert all(f.message.count("\n") == 0 for f in found)


def test_a_gguf_drafter_gets_llamacpp_findings_not_a_pointer_elsewhere(tiny_gguf: Path) -> None:
    report = eagleconv.validate(tiny_gguf, engines=("llama.cpp", "vllm"), target=PAIR / "target", numeric=False)
    skipped = {f.engine for f in report.findings if f.code == "EC040" and "loads no GGUF drafter" in f.message}
    assert skipped == {resolve_engines("vllm")[0].label} and report.ok, [f.message for f in report.findings]


# -- real llama.cpp ----------------------------------------------------------------------------

from tests.support.ci_cache import llamacpp_build as _build, smollm2_pair as _smollm2  # noqa: E402


@pytest.mark.skipif(_build() is None, reason="no cached llama.cpp b11434 build (.ci/llamacpp-env builds it)")
@pytest.mark.skipif(_smollm2() is None, reason="no SmolLM2 pair (.ci/smollm2 builds it)")
def test_validate_says_which_gguf_variants_real_llamacpp_runs(tmp_path: Path) -> None:
    build, pair = _build(), _smollm2()
    assert build is not None and pair is not None
    target_gguf = pair / "llamacpp-target-f32.gguf"  # written by .ci/llamacpp-parity; made here when absent
    if not target_gguf.exists():
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / ".ci"))
        from llamacpp_parity import their_gguf

        made, err = their_gguf(build, pair / "target", pair / "target", tmp_path / "target-f32.gguf")
        assert made is not None, err
        target_gguf = made
    base = tmp_path / "eagle3.gguf"
    convert(pair / "eagle3", base, "gguf", target=target_gguf)
    env = {**os.environ, "LD_LIBRARY_PATH": str(build / "bin")}
    wrong = []
    for name, args in variants(hidden=576, target_hidden=576, n_layers=30, ids=[2, 15, 27]).items():
        args = dict(args)
        code = args.pop("code")
        path = rewrite(base, tmp_path / f"{len(wrong)}-{name.replace(' ', '_')}.gguf", **args)
        found = llamacpp_findings(path, pair / "target")
        said_fails = any(f.severity == "error" and f.effect == "load_fails" for f in found)
        proc = subprocess.run([str(build / "bin" / "llama-speculative-simple"), "-m", str(target_gguf), "-md", str(path),
                               "--spec-type", "draft-eagle3", "-p", "What is Python?", "-n", "4", "--temp", "0",
                               "--spec-draft-n-max", "3", "-t", "1"], capture_output=True, text=True, env=env,
                              timeout=300)
        ran = proc.returncode == 0 and "n_accept" in proc.stdout + proc.stderr
        if ran == said_fails or (code is not None) != said_fails:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            wrong.append(f"{name}: llama.cpp rc {proc.returncode} {tail}; validate {[f.message for f in found]}")
    assert not wrong, "\n".join(wrong)
