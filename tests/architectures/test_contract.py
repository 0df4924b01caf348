"""The architecture contract: every registered architecture, in every layout that can hold it, behaves the same way.

Nothing here lists an architecture or a layout: the cases come from the registries
(``architectures.ARCHITECTURES``, ``formats.LAYOUTS``) and the expected engine verdicts from the
architecture modules (``Architecture.verdicts``).  A new architecture module is tested by this file
as soon as it is registered.  Each case runs a seeded synthetic drafter through
inspect -> convert round trip through every other layout holding it (tensor bytes exact) ->
validate (the verdicts the module declares) -> forward -> diff against its vLLM conversion.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

import eagleconv
from eagleconv import architectures
from eagleconv.spec.canonical import CANONICAL_NAME, expected_tensors
from eagleconv.formats import LAYOUTS
from eagleconv.forward.model import Drafter
from eagleconv.forward.weights import DictSource
from eagleconv.forward.api import inputs_for
from eagleconv.io.reader import open_checkpoint
from eagleconv.readers.loading import load_drafter
from eagleconv.synthetic import DrafterRecipe, TinyDims, canonical_tensors, check_recipe, make_drafter

SERVABLE = TinyDims(target_hidden=32)  # a drafter that borrows the target's embedding must have its width
ARCHS = architectures.names()
DEFAULT_ENGINE = "vllm 0.32"


def holds(layout: str, arch: str) -> bool:
    return arch in LAYOUTS[layout].architectures


def writable(layout: str, eagle31: bool) -> bool:
    """The layout (and its producer) can state the recipe's EAGLE version."""
    if eagle31 and "fc_norm" not in LAYOUTS[layout].flags:
        return False
    try:
        check_recipe(DrafterRecipe(producer=layout, eagle31=eagle31))
    except ValueError:
        return False
    return True


CASES = [pytest.param(arch, layout, e31, id=f"{arch}-{layout}-eagle3{'1' if e31 else ''}")
         for arch in ARCHS for layout in LAYOUTS for e31 in (False, True)
         if holds(layout, arch) and writable(layout, e31) and not LAYOUTS[layout].needs_target]


def canonical_digests(path) -> dict[str, str]:
    """sha256 of each tensor's stored bytes, by canonical name (through the detected layout)."""
    loaded = load_drafter(path, allow_pickle=True)
    try:
        with open_checkpoint(path, allow_pickle=True) as store:
            return {c: hashlib.sha256(store.read_raw(n).tobytes()).hexdigest() for c, n in loaded.read.canonical.items()}
    finally:
        loaded.close()


def expected_errors(arch: str, layout: str, engine: str) -> set[str]:
    """The error codes the architecture module and the layout module declare for a clean drafter of ``arch`` in
    ``layout`` under ``engine``."""
    out: set[str] = set()
    for v in architectures.get(arch).verdicts:
        if v.engine == engine and (not v.layouts or layout in v.layouts):
            out |= v.errors
    for v in LAYOUTS[layout].verdicts:
        if v.engine == engine:
            out |= v.errors
    return out


def engines_for(arch: str, layout: str) -> list[str]:
    return sorted({DEFAULT_ENGINE} | {v.engine for v in architectures.get(arch).verdicts + LAYOUTS[layout].verdicts})


def write_target(directory, layers: int = 16) -> str:
    d = SERVABLE
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d.target_hidden,
        "intermediate_size": 4 * d.target_hidden, "num_attention_heads": d.heads, "num_key_value_heads": d.kv_heads,
        "num_hidden_layers": layers, "vocab_size": d.vocab, "rms_norm_eps": 1e-5, "max_position_embeddings": 4096}))
    return str(directory)


def test_the_cases_cover_every_architecture_and_layout():
    """Every architecture is held by some layout, every layout holds some architecture, each writes a class name."""
    assert {c.values[0] for c in CASES} == set(ARCHS)
    assert {c.values[1] for c in CASES} == {n for n, layout in LAYOUTS.items() if not layout.needs_target}
    for layout in LAYOUTS.values():
        assert all(names and all(isinstance(n, str) for n in names) for names in layout.architectures.values())
    for arch in architectures.ARCHITECTURES.values():
        assert set(arch.layouts) <= set(LAYOUTS), f"{arch.name} names a layout that is not registered"
        for v in arch.verdicts:
            assert v.layouts <= held_by(arch.name), f"{arch.name}: a verdict for a layout that cannot hold it"


def test_each_pair_is_stated_once():
    """How a layout writes an architecture is stated on one side only: the layout's ``holds`` or the
    architecture's ``layouts``, never both (the layout's entry would hide the other)."""
    for layout in LAYOUTS.values():
        assert set(layout.holds) <= set(ARCHS), f"{layout.name} holds an architecture that is not registered"
        both = [a for a in layout.holds if layout.name in architectures.get(a).layouts]
        assert not both, f"{layout.name} and {both} both state how {layout.name} writes them"


def held_by(arch: str) -> set[str]:
    return {n for n, layout in LAYOUTS.items() if arch in layout.architectures}


@pytest.mark.parametrize("arch,layout,eagle31", CASES)
def test_architecture_in_layout(tmp_path, arch, layout, eagle31):
    check_architecture_in_layout(tmp_path, arch, layout, eagle31)


def cases(arch: str) -> list[tuple[str, bool]]:
    """(layout, eagle31) for every layout that holds ``arch`` and can write the recipe (GGUF aside)."""
    return [(layout, e31) for layout in LAYOUTS for e31 in (False, True)
            if holds(layout, arch) and writable(layout, e31) and not LAYOUTS[layout].needs_target]


def check_architecture_in_layout(tmp_path, arch: str, layout: str, eagle31: bool) -> None:
    """The contract for one case: synthetic -> inspect -> round trip -> validate -> forward -> diff (a plugin
    architecture's test module calls it too: tests/architectures/test_plugin_architecture.py)."""
    recipe = DrafterRecipe(producer=layout, architecture=arch, eagle31=eagle31, dims=SERVABLE)
    src = make_drafter(tmp_path / "src", recipe)

    # inspect: the producer's own files are read as that layout and this architecture, with exactly its tensors
    report = eagleconv.inspect(src, allow_pickle=True)
    assert (report.format, report.architecture) == (layout, arch)
    assert report.eagle_version == ("3.1" if eagle31 else "3")
    spec = report.spec
    present = {n: tuple(t.shape) for n, t in canonical_tensors(recipe).items()}
    stored = canonical_digests(src)
    assert all(CANONICAL_NAME.match(n) for n in present)
    expected = expected_tensors(spec)
    assert {n: e.shape for n, e in expected.items() if n in stored} == {n: present[n] for n in stored}
    assert {n for n, e in expected.items() if e.required} <= set(stored)

    # convert: through every other layout that holds it and back, tensor bytes exact
    for other in LAYOUTS:
        if other == layout or not holds(other, arch) or (eagle31 and "fc_norm" not in LAYOUTS[other].flags) \
                or LAYOUTS[other].needs_target:  # GGUF: tests/test_gguf_layout.py
            continue
        lossy = [n.removesuffix(".weight") for n in stored
                 if (cap := LAYOUTS[other].holding_policy(n)) is not None and cap.policy == "drop"]
        there, back = tmp_path / f"to-{other}", tmp_path / f"back-{other}"
        eagleconv.convert(src, there, other, drop=lossy, allow_pickle=True)
        assert eagleconv.inspect(there).architecture == arch
        eagleconv.convert(there, back, layout, allow_pickle=True)
        got = canonical_digests(back)
        want = {n: d for n, d in stored.items() if n.removesuffix(".weight") not in lossy}
        derived = {n for n in set(got) ^ set(want) if n == "t2d"}  # re-derived exactly from d2t where a layout lacks it
        assert {n: d for n, d in got.items() if n not in derived} == {n: d for n, d in want.items() if n not in derived}, other

    # validate: exactly the verdicts the architecture and layout modules declare (none: servable)
    target = write_target(tmp_path / "target")
    for engine in engines_for(arch, layout):
        checked = eagleconv.validate(src, target=target, engines=(engine,), allow_pickle=True)
        errors = {f.code for f in checked.findings if f.severity == "error"}
        assert errors == expected_errors(arch, layout, engine), (engine, [f.message for f in checked.findings
                                                                           if f.severity == "error"])

    # forward, and diff against the vLLM layout's copy: the same math whatever the layout
    drafter = eagleconv.load(src, allow_pickle=True, dtype="float64")
    result = drafter.draft(inputs_for(drafter, batch=2, length=6), steps=3)
    assert all(torch.isfinite(f).all() for f in result.feedback)
    if layout != "vllm" and holds("vllm", arch):
        vllm = tmp_path / "vllm-copy"
        eagleconv.convert(src, vllm, "vllm", allow_pickle=True)
        assert eagleconv.diff(src, vllm, steps=3, allow_pickle=True, batch=2, length=6).identical


EQUIVALENT = [a for a in ARCHS if architectures.get(a).equivalent is not None]


@pytest.mark.parametrize("arch", EQUIVALENT)
def test_forward_equals_its_equivalent_architecture(tmp_path, arch):
    """An architecture that states an equivalent (fused projections of a split one) computes exactly what that one
    computes from the split tensors (float64: within 1e-12)."""
    a = architectures.get(arch)
    producer = min(n for n in held_by(arch) if not LAYOUTS[n].needs_target)
    recipe = DrafterRecipe(producer=producer, architecture=arch, dims=SERVABLE, layers=2, dtype="float32")
    tensors = canonical_tensors(recipe)
    spec = eagleconv.inspect(make_drafter(tmp_path / "d", recipe)).spec
    assert spec is not None and spec.architecture == arch
    split = a.split_tensors(tensors, spec)
    twin_spec = spec.model_copy(update={"architecture": a.equivalent})
    assert set(expected_tensors(twin_spec)) - set(split) <= {"embed_tokens.weight"}
    runs = []
    for s, t in ((spec, tensors), (twin_spec, split)):
        d = Drafter(s, DictSource(t), dtype="float64")
        runs.append(d.draft(inputs_for(d, batch=2, length=6), steps=3))
    for x, y in zip(runs[0].logits + runs[0].feedback, runs[1].logits + runs[1].feedback):
        finite = torch.isfinite(x)
        assert torch.equal(finite, torch.isfinite(y))
        assert torch.allclose(x[finite], y[finite], rtol=1e-12, atol=1e-12)
    assert [t.tolist() for t in runs[0].tokens] == [t.tolist() for t in runs[1].tokens]

