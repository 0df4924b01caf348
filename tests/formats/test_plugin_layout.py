"""A ninth layout, defined and registered here only, passes the layout contract with no change to eagleconv/.

``Scribe`` is a made-up producer: its tensors live under ``draft.*`` (fc as ``draft.proj``, layer N as
``draft.blockN``; EAGLE-3.1's ``fc_norm.*`` at the top level), its config nests the decoder under ``decoder`` and states the draft vocabulary and the aux
capture in fields of its own (``vocab.draft``, ``capture.layers|width|count``).  It
states data only: renames, a field table, what it holds (``holds``), how to recognise it, and what vLLM 0.32
says of it (its names and class are not vLLM's: EC003 + EC040).  Its synthetic recipe is a ``Producer`` of the
same name.  Both are registered for this module only, after every shipped architecture (and a test-only family
is registered after them), and removed afterwards.  It goes through the contract of
tests/architectures/test_contract.py (synthetic -> inspect -> round trip through every layout that holds llama
-> validate -> forward -> diff), ``validate`` (in-process CLI, ``--json``), convert to vllm and back into it (the
same tensor bytes), and simulate (the drafts of its vLLM conversion, exactly).
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import eagleconv  # noqa: E402
from eagleconv import architectures, formats, synthetic  # noqa: E402
from eagleconv.architectures.base import InLayout, Verdict  # noqa: E402
from eagleconv.architectures.llama import Llama  # noqa: E402
from eagleconv.formats import LAYOUTS  # noqa: E402
from eagleconv.formats.base import Layout, Seen, architectures_of  # noqa: E402
from eagleconv.formats.base.fields import ConfigField, SameAs, hf_fields  # noqa: E402
from eagleconv.formats.base.renames import Rename  # noqa: E402
from eagleconv.simulation import simulate  # noqa: E402
from eagleconv.support.jsonio import JSONObject  # noqa: E402
from eagleconv.synthetic import DrafterRecipe, make_drafter  # noqa: E402
from eagleconv.synthetic.base import Producer, flags31  # noqa: E402

from tests.architectures import test_contract as contract  # noqa: E402

NAME, CLASS, LATER = "scribe", "ScribeEagle3Drafter", "scribe_later_family"


class Scribe(Layout):
    name = NAME
    producer = "test-only producer (tests/formats/test_plugin_layout.py)"
    description = "draft.* keys (fc as draft.proj, layer N as draft.blockN), decoder nested under decoder"
    # the architecture registered after this layout (LATER) is held too: read when asked, never snapshotted
    holds = {"llama": InLayout((CLASS,)), LATER: InLayout((CLASS,))}
    verdicts = (Verdict("vllm 0.32", frozenset({"EC003", "EC040"}), "vLLM neither maps draft.* names nor "
                        "registers ScribeEagle3Drafter: convert --to vllm serves it"),)
    renames = (Rename("fc_norm.{rest}", "fc_norm.{rest}"), Rename("draft.proj.{rest}", "fc.{rest}"),
               Rename("draft.block{n}.{rest}", "layers.{n}.{rest}"), Rename("draft.{rest}", "{rest}"))
    fields = hf_fields(
        decoder="decoder.",
        draft_vocab_size=ConfigField(("vocab.draft",)),
        target_hidden_size=ConfigField(("capture.width",)),
        num_aux_hidden_states=ConfigField(("capture.count",)),
        aux_layer_ids=ConfigField(("capture.layers",)),
        norm_before_fc=None, norm_before_residual=None, use_aux_hidden_state=None,
    )
    flags = frozenset({"fc_norm", "norm_output"})
    defaults = {"target_hidden_size": SameAs("hidden_size"), "num_aux_hidden_states": 3, "fc_norm": False,
                "norm_output": False}
    meta_keys = Layout.meta_keys | {"scribe_version"}

    @classmethod
    def looks_like(cls, seen: Seen) -> tuple[int, list[str]]:
        if seen.names is not None and "draft.proj.weight" in seen.names:
            return 100, ["draft.proj.weight (Scribe's fc)"]
        if seen.names is None and CLASS in architectures_of(seen.config):
            return 50, [f"architectures {CLASS}"]
        return 0, []


class ScribeRecipe(Producer):
    """What the Scribe exporter writes: its own config shape and names."""

    name = NAME

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d = recipe.dims
        return {"architectures": [CLASS], "scribe_version": 1, "decoder": decoder, "vocab": {"draft": d.draft_vocab},
                "capture": {"layers": list(d.aux_ids), "width": d.target_hidden, "count": len(d.aux_ids)},
                **flags31(recipe), "torch_dtype": recipe.dtype}

    @classmethod
    def stored_name(cls, canonical: str) -> str:
        if canonical.startswith("fc_norm."):
            return canonical
        if canonical.startswith("fc."):
            return "draft.proj." + canonical[len("fc."):]
        if canonical.startswith("layers."):
            n, rest = canonical[len("layers."):].split(".", 1)
            return f"draft.block{n}.{rest}"
        return "draft." + canonical


class LaterFamily(Llama):
    """A family registered after the Scribe layout: Llama's layer under another name (the layout's ``holds``
    names it before it exists)."""

    name = LATER
    description = "test-only: Llama's decoder layer, registered after the Scribe layout"
    priority = 260
    fallback = False
    default_model_type = LATER
    model_types = frozenset({LATER})
    synthetic_model_type = LATER
    transformers_model_types = frozenset()
    transformers_heads_divide_hidden = frozenset()
    examples = ()
    verdicts = ()


@pytest.fixture(scope="module")
def plugin():
    """The Scribe layout and its synthetic recipe registered through the public decorators, after every shipped
    architecture; all undone afterwards, so no other module sees a ninth layout."""
    assert LATER not in Scribe.architectures and "llama" in Scribe.architectures  # read from the tables, unregistered
    formats.register(Scribe)
    synthetic.register(ScribeRecipe)
    yield Scribe
    del LAYOUTS[NAME], synthetic.RECIPES[NAME]
    architectures.ARCHITECTURES.pop(LATER, None)


def test_the_layout_is_registered_only_here_and_reads_what_it_holds_when_asked(plugin):
    assert formats.get_layout(NAME) is Scribe and NAME not in synthetic.PRODUCERS
    assert Scribe.architectures == {"llama": (CLASS,)}
    assert {n for n, layout in LAYOUTS.items() if "llama" in layout.architectures} >= {NAME, "vllm"}
    architectures.register(LaterFamily)
    try:
        assert Scribe.architectures == {"llama": (CLASS,), LATER: (CLASS,)}  # registered later, seen at once
        assert Scribe.holding(LATER) == InLayout((CLASS,)) and LAYOUTS["vllm"].holding(LATER) is None
    finally:
        del architectures.ARCHITECTURES[LATER]
    assert Scribe.architectures == {"llama": (CLASS,)}


@pytest.mark.parametrize("eagle31", [False, True])
def test_contract(plugin, tmp_path, eagle31):
    assert (NAME, eagle31) in contract.cases("llama")
    contract.check_architecture_in_layout(tmp_path, "llama", NAME, eagle31)


def test_validate_json_names_the_layout_and_vllms_verdict(plugin, tmp_path):
    from click.testing import CliRunner

    from eagleconv.cli.main import cli

    src = make_drafter(tmp_path / "scribe", DrafterRecipe(producer=NAME, dims=contract.SERVABLE))
    assert (src / "model.safetensors").exists() and json.loads((src / "config.json").read_text())["capture"]
    result = CliRunner().invoke(cli, ["validate", str(src), "--json", "--target", contract.write_target(tmp_path / "t")])
    report = json.loads(result.output)
    assert (report["format"], report["architecture"], report["aux_layer_ids"]) == (NAME, "llama", [2, 8, 13])
    assert result.exit_code == 1 and {f["code"] for f in report["findings"] if f["severity"] == "error"} == \
        {"EC003", "EC040"}  # what the layout declares vLLM says; its vLLM conversion is clean (the contract)


def test_convert_to_vllm_and_back_keeps_names_config_and_bytes(plugin, tmp_path):
    from safetensors.torch import load_file

    src = make_drafter(tmp_path / "scribe", DrafterRecipe(producer=NAME, eagle31=True, dims=contract.SERVABLE))
    vllm, back = tmp_path / "vllm", tmp_path / "back"
    eagleconv.convert(src, vllm, "vllm")
    eagleconv.convert(vllm, back, NAME)
    config = json.loads((back / "config.json").read_text())
    assert config["architectures"] == [CLASS] and config["capture"] == {"layers": [2, 8, 13], "width": 32, "count": 3}
    assert (config["fc_norm"], config["norm_output"], config["vocab"]) == (True, True, {"draft": 64})
    assert eagleconv.inspect(back).format == NAME
    original, again = load_file(src / "model.safetensors"), load_file(back / "model.safetensors")
    assert set(again) == set(original) and "draft.proj.weight" in again and "draft.block0.mlp.up_proj.weight" in again
    assert all(torch.equal(again[n], original[n]) for n in original)
    assert "fc.weight" in load_file(vllm / "model.safetensors")


def test_simulate_refuses_it_as_vllm_would_and_runs_its_vllm_conversion_exactly(plugin, tmp_path):
    """The tiny pair's trained drafter converted into Scribe: simulate (vLLM's loop) refuses the Scribe copy with
    the layout's vLLM verdict, and its conversion back to vllm drafts and accepts exactly what the original does."""
    from pathlib import Path

    from eagleconv.simulation.report import SimulateError

    pair = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"
    prompts = json.loads((pair / "prompts.json").read_text())[:2]
    scribe, back = tmp_path / "scribe", tmp_path / "back"
    eagleconv.convert(pair / "eagle3", scribe, NAME)
    assert eagleconv.inspect(scribe).format == NAME
    with pytest.raises(SimulateError, match="vLLM fails at load: architecture ScribeEagle3Drafter"):
        simulate(scribe, pair / "target", prompts, max_tokens=8)
    eagleconv.convert(scribe, back, "vllm")
    got = simulate(back, pair / "target", prompts, max_tokens=8).model_dump()
    want = simulate(pair / "eagle3", pair / "target", prompts, max_tokens=8).model_dump()
    same = ("tokens", "drafts", "num_drafts", "num_accepted_tokens", "accepted_per_position")
    assert got["num_accepted_tokens"] > 0  # the trained drafter's proposals are accepted: a misread tensor would show
    assert {k: got[k] for k in same} == {k: want[k] for k in same}
