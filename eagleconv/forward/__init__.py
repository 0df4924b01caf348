"""Forward passes: the reference drafter (vLLM's EAGLE-3/3.1 math in plain PyTorch) and what runs on it.

``load(path)`` returns a :class:`Drafter` with ``.forward`` and ``.draft``;
``validate_forward`` and ``diff`` return the reports ``validate --forward``
and ``eagleconv diff`` print; ``capture_aux_states`` runs a transformers target.
Importing this package imports torch; the CLI imports it only when asked.
"""

from __future__ import annotations

from ..support._extras import need

need("torch", "the forward pass (validate --forward, diff, eagleconv.forward)")

from .api import default_aux_ids, inputs_for, load  # noqa: E402 (after the need() check)
from .inputs import Target, capture_aux_states, check_prompts, read_prompts, synthetic_inputs  # noqa: E402 (after need())
from .model import COMPUTE_DTYPES, DraftInputs, DraftResult, Drafter, StepOutput, UnrunnableDrafter  # noqa: E402 (after need())
from .ops import BACKENDS, RECIPES, NormOps, get_ops  # noqa: E402 (after need())
from .run import compare, diff, validate_forward  # noqa: E402 (after need())
from .weights import CheckpointSource, DictSource, TensorSource  # noqa: E402 (after need())

__all__ = ["BACKENDS", "COMPUTE_DTYPES", "RECIPES", "CheckpointSource", "DictSource", "DraftInputs", "DraftResult",
           "Drafter", "NormOps", "StepOutput", "Target", "TensorSource", "UnrunnableDrafter", "capture_aux_states",
           "check_prompts", "compare", "default_aux_ids", "diff", "get_ops", "inputs_for", "load", "read_prompts",
           "synthetic_inputs", "validate_forward"]
