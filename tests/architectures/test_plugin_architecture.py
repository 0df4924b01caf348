"""A fifth architecture, defined and registered here only, passes the whole contract with no change to eagleconv/.

``GemmaNorm`` is Llama's decoder layer with Gemma-style RMSNorms, which multiply by ``1 + w`` (a unit norm is stored
as 0.0).  It states nothing but data and the two norm hooks (``norm_scale``, ``norm_stored``; ``unit_norm``
follows), and ``equivalent = "llama"`` with ``split_tensors`` adding 1 to every norm weight.  Registered for this
module only (and removed after), it goes through: synthetic -> inspect -> round trip through every layout that
holds it -> validate -> forward -> diff (the contract of test_contract.py), its forward equal to the Llama drafter
of its split tensors, simulate (drafts equal the Llama twin's, cached path equal to the full re-run), and upgrade
(new norms stored at the family's unit weight, 0.0) and back.

The vLLM profile here knows the plugin's drafter class (``Eagle3GemmaNormForCausalLM``, family gemma_norm): what a
vLLM plugin registering a model class would add; stock vLLM 0.32 registers none, and refuses it (EC040).
"""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import eagleconv  # noqa: E402
from eagleconv import architectures  # noqa: E402
from eagleconv.architectures.base import InLayout  # noqa: E402
from eagleconv.architectures.llama import Llama  # noqa: E402
from eagleconv.engines import resolve_engines  # noqa: E402
from eagleconv.engines.base import DrafterClass  # noqa: E402
from eagleconv.formats import LAYOUTS  # noqa: E402
from eagleconv.simulation import simulate  # noqa: E402
from eagleconv.synthetic import DrafterRecipe, TinyDims, make_drafter  # noqa: E402

from . import test_contract as contract  # noqa: E402

NAME, CLASS = "gemma_norm", "Eagle3GemmaNormForCausalLM"


class GemmaNorm(Llama):
    name = NAME
    description = "test-only: Llama's decoder layer with Gemma-style (1 + w) RMSNorms"
    priority = 250
    fallback = False
    default_model_type = "gemma_norm"
    model_types = frozenset({"gemma_norm"})
    synthetic_model_type = "gemma_norm"
    synthetic_architecture = {"*": CLASS}
    layouts = {"vllm": InLayout((CLASS,)), "torchspec": InLayout((CLASS,))}
    transformers_model_types = frozenset()
    transformers_heads_divide_hidden = frozenset()
    harmless_config_keys = {}
    examples = ()
    verdicts = ()
    equivalent = "llama"

    @classmethod
    def norm_scale(cls, stored):
        return 1 + stored

    @classmethod
    def norm_stored(cls, scale):
        return scale - 1

    @classmethod
    def split_tensors(cls, tensors, spec):
        """The Llama form: every norm weight w stored as 1 + w (float64, so the sum is exact)."""
        return {n: t.double() + 1 if is_norm(n) else t for n, t in tensors.items()}


def is_norm(name: str) -> bool:
    return name.endswith("norm.weight") or (name.startswith("fc_norm.") and name.endswith(".weight"))


@pytest.fixture(scope="module")
def plugin():
    """GemmaNorm registered (through the public decorator) after the layouts, which see it with no re-binding, and a
    vLLM profile that knows its class; all undone afterwards, so no other module sees a fifth architecture."""
    architectures.register(GemmaNorm)
    profile = resolve_engines(["vllm:0.32"])[0]
    profile.classes[CLASS] = DrafterClass(CLASS, family=NAME, aux_count_paths=("num_aux_hidden_states",),
                                          dropped=("mask_hidden",))
    yield GemmaNorm
    del architectures.ARCHITECTURES[NAME]
    del profile.classes[CLASS]
    assert all(NAME not in layout.architectures for layout in LAYOUTS.values())  # as shipped again


def test_the_plugin_is_registered_only_here(plugin):
    assert architectures.get(NAME) is GemmaNorm and NAME in architectures.names()
    assert {n for n, layout in LAYOUTS.items() if NAME in layout.architectures} == {"vllm", "torchspec"}
    assert GemmaNorm.unit_norm(3).tolist() == [0.0, 0.0, 0.0]  # follows from norm_stored: nothing else stated


@pytest.mark.parametrize("layout,eagle31", [("vllm", False), ("vllm", True), ("torchspec", False),
                                            ("torchspec", True)])
def test_contract(plugin, tmp_path, layout, eagle31):
    assert (layout, eagle31) in contract.cases(NAME)
    contract.check_architecture_in_layout(tmp_path, NAME, layout, eagle31)


def test_forward_equals_llama_with_one_plus_w(plugin, tmp_path):
    contract.test_forward_equals_its_equivalent_architecture(tmp_path, NAME)


SMALL = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, initializer_range=0.2, rope_theta=10000.0)
DIMS = TinyDims(hidden=64, target_hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=300,
                draft_vocab=100, aux_ids=(0, 1, 3), target_layers=3)
PROMPTS = [[1, 17, 42, 99, 7, 30, 200, 5], [1, 250], [1, 4, 9, 16, 25, 36]]


@pytest.fixture(scope="module")
def pair(plugin, tmp_path_factory):
    """A seeded Llama target (transformers' writer) and the plugin drafter of its width, plus the Llama twin: the
    same files with model_type llama and every norm weight stored as 1 + w (float32, as the plugin computes it)."""
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("plugin-pair")
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)).save_pretrained(root / "target")
    drafter = make_drafter(root / "eagle3-gemma_norm", DrafterRecipe(producer="vllm", architecture=NAME, dims=DIMS,
                                                                     dtype="float32", seed=3))
    twin = root / "eagle3-llama-twin"
    shutil.copytree(drafter, twin)
    config = json.loads((twin / "config.json").read_text())
    config.update(model_type="llama", architectures=["LlamaForCausalLMEagle3"])
    (twin / "config.json").write_text(json.dumps(config))
    tensors = load_file(twin / "model.safetensors")
    save_file({n: t + 1 if is_norm(n) else t for n, t in tensors.items()}, twin / "model.safetensors")
    return drafter, twin, root / "target"


def test_simulate_runs_the_plugins_norms(pair):
    drafter, twin, target = pair
    assert eagleconv.inspect(drafter).architecture == NAME and eagleconv.inspect(twin).architecture == "llama"
    got = simulate(drafter, target, PROMPTS, num_speculative_tokens=3, max_tokens=12).model_dump()
    want = simulate(twin, target, PROMPTS, num_speculative_tokens=3, max_tokens=12).model_dump()
    full = simulate(drafter, target, PROMPTS, num_speculative_tokens=3, max_tokens=12, kv_cache=False).model_dump()
    same = ("tokens", "drafts", "num_drafts", "num_accepted_tokens", "accepted_per_position")
    assert len({tuple(d) for row in got["drafts"] for d in row}) > 5  # the drafts vary: a wrong norm would show
    assert {k: got[k] for k in same} == {k: want[k] for k in same} == {k: full[k] for k in same}


def test_upgrade_adds_unit_norms_of_the_family_and_downgrade_folds_them_back(pair, tmp_path):
    from safetensors.torch import load_file

    drafter, _, target = pair
    up, down = tmp_path / "eagle31", tmp_path / "eagle3-again"
    eagleconv.upgrade(drafter, up, norm_output=False)
    upgraded = eagleconv.inspect(up)
    assert (upgraded.eagle_version, upgraded.architecture) == ("3.1", NAME)
    new = load_file(up / "model.safetensors")
    norms = [n for n in new if n.startswith("fc_norm.")]
    assert len(norms) == len(DIMS.aux_ids)
    assert all(torch.equal(new[n], torch.zeros_like(new[n])) for n in norms)  # (1 + 0): the identity scale
    runs = simulate(up, target, PROMPTS, num_speculative_tokens=3, max_tokens=6)
    assert runs.num_drafts > 0
    eagleconv.downgrade(up, down, allow_lossy=True)  # removing the normalisation itself is lossy
    before, after = load_file(drafter / "model.safetensors"), load_file(down / "model.safetensors")
    assert torch.equal(after["fc.weight"], before["fc.weight"])  # folding a unit scale leaves fc as it was
    assert eagleconv.inspect(down).eagle_version == "3"
