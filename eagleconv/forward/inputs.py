"""Inputs for a draft round: seeded synthetic ones, or real ones captured from a target model.

Aux states are keyed by vLLM's ``hidden_state_index`` id (id i = the residual
stream entering target layer i, HF ``output_hidden_states[i]``; id L = the
pre-final-norm stream), so a drafter run "as an engine reads it" that captures
other layers gets other inputs, as it would in the engine.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..support._extras import need
from ..errors import FormatError, UsageError
from .model import DraftInputs

if TYPE_CHECKING:
    from .protocols import TargetModel


def _gen(seed: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + salt * 7_919) % (2**63 - 1))


def synthetic_aux(seed: int, layer_id: int, batch: int, length: int, width: int) -> torch.Tensor:
    """One target layer's states [B, T, Ht], seeded by (seed, layer id); magnitude grows with depth like a
    real residual stream (RMS 1 + id/4), with a few outlier channels."""
    g = _gen(seed, 10_000 + layer_id)
    x = torch.randn(batch, length, width, generator=g, dtype=torch.float64) * (1.0 + layer_id / 4)
    x[..., :: max(1, width // 4)] *= 8.0
    return x.float()


def synthetic_inputs(vocab_size: int, target_hidden: int, aux_ids: Sequence[int], *, batch: int = 4,
                     length: int = 16, seed: int = 0) -> DraftInputs:
    """B seeded sequences of T+1 target-vocabulary tokens and their aux states for ``aux_ids``."""
    tokens = torch.randint(0, vocab_size, (batch, length + 1), generator=_gen(seed, 1))
    ids = tuple(sorted(aux_ids))
    aux = torch.cat([synthetic_aux(seed, i, batch, length, target_hidden) for i in ids], dim=-1)
    return DraftInputs(tokens, aux, "synthetic", ids, [f"synthetic inputs: seed {seed}, {batch} sequences of "
                                                       f"{length} tokens, aux states for target layers {list(ids)}"])


def read_prompts(path: str | Path, vocab_size: int | None = None) -> list[list[int]]:
    """The one prompts-file reader (validate/diff --prompts, upgrade/downgrade calibration, simulate): a JSON list
    of token-id lists, under :func:`check_prompts`' rules.  Anything else is a FormatError naming the file (exit 2)."""
    from ..support.bounds import check_prompts_size, read_capped

    p = Path(path)
    try:
        data = json.loads(read_capped(p, "the prompts file").decode("utf-8"))  # /dev/zero, a sparse 3 GB file: refused
    except OSError as exc:
        raise FormatError(f"cannot read the prompts: {exc.strerror or exc}", p) from None
    except ValueError as exc:  # also undecodable bytes
        raise FormatError(f"the prompts are not JSON: {exc}", p) from None
    prompts = check_prompts(data, p, vocab_size)
    check_prompts_size(prompts, p)
    return prompts


def check_prompts(data: object, path: str | Path | None = None, vocab_size: int | None = None) -> list[list[int]]:
    """Prompts as every command needs them: a non-empty list of prompts, each at least one token (the target sees
    it and predicts the next, which gives the drafter's first pass its one row; nothing needs two), each token a
    non-negative integer (not a bool) and, given ``vocab_size``, inside the target's vocabulary.  Also checks
    prompts given as lists in the library; a FormatError naming ``path`` at the first violation."""
    def show(value: object) -> str:
        text = json.dumps(value, default=str)
        return text if len(text) <= 40 else text[:37] + "..."

    if not isinstance(data, list | tuple) or not data:
        raise FormatError(f"prompts must be a non-empty JSON list of token-id lists, not {show(data)}", path)
    for n, prompt in enumerate(data):
        if not isinstance(prompt, list | tuple) or not prompt:
            raise FormatError(f"prompt {n} is {show(prompt)}, not a non-empty list of token ids", path)
        for t in prompt:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise FormatError(f"prompt {n}: {show(t)} is not a token id (a non-negative integer)", path)
            if vocab_size is not None and t >= vocab_size:
                raise FormatError(f"prompt {n}: token {t} is outside the target's vocabulary (0..{vocab_size - 1})",
                                  path)
    return [list(prompt) for prompt in data]


def _dtype_kwarg(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """from_pretrained's dtype argument: ``dtype`` from transformers 4.56, ``torch_dtype`` before (floor: 4.51.3)."""
    import transformers
    from packaging.version import Version

    return {"dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype": dtype}


class Target:
    """A Hugging Face target model run by transformers on CPU, float32."""

    runtime = "transformers"
    fallback: str | None = None  # why open_target(runtime="auto") did not run it natively

    def __init__(self, directory: str | Path):
        from ..config.target import check_target_weights, read_target_config

        self.path = Path(directory)
        if not (self.path / "config.json").is_file():
            raise FormatError("no config.json in the target directory", self.path)
        check_target_weights(self.path, read_target_config(self.path)[1])  # one line, before transformers reads it
        need("transformers", "a target run by transformers (--target-runtime transformers, capture_aux_states)")
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()  # --json output stays clean; eagleconv draws its own status
        hf_logging.set_verbosity_error()
        try:
            self.model: Any = AutoModelForCausalLM.from_pretrained(str(self.path), **_dtype_kwarg(torch.float32),
                                                                   use_safetensors=True, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise FormatError(f"transformers cannot load the target: {str(exc).splitlines()[0]}", self.path) from None
        self.model.eval()
        self.num_layers = int(self.model.config.num_hidden_layers)
        self.vocab_size = int(self.model.config.vocab_size)
        self.hidden_size = int(self.model.config.hidden_size)

    @property
    def embed(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight.detach()

    @property
    def lm_head(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight.detach()

    def pack_linears(self) -> bool:
        """transformers runs its own linears: nothing to pack."""
        return False

    @property
    def packed_weights(self) -> int:
        return 0

    def run(self, prompt: Sequence[int], layer_ids: Sequence[int]) -> tuple[dict[int, torch.Tensor], int]:
        """Hidden states [T, Ht] for each hidden_state_index id, and the greedy next token."""
        return run_target(self, prompt, layer_ids)

    def forward(self, tokens: Sequence[int], layer_ids: Sequence[int]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Greedy next token after every position [T], and hidden states [T, Ht] per hidden_state_index id."""
        ids = torch.tensor([list(tokens)])
        captured: dict[str, torch.Tensor] = {}
        norm = getattr(getattr(self.model, "model", None), "norm", None)
        hook = None
        if norm is not None:
            hook = norm.register_forward_pre_hook(lambda _m, args: captured.__setitem__("pre_norm", args[0].detach()))
        try:
            with torch.no_grad():
                out = self.model(ids, output_hidden_states=True)
        finally:
            if hook is not None:
                hook.remove()
        states = {}
        for i in layer_ids:
            if i == self.num_layers:
                if "pre_norm" not in captured:
                    raise UsageError(f"aux id {i} (the pre-final-norm stream) cannot be captured from this target")
                states[i] = captured["pre_norm"][0]
            else:
                states[i] = out.hidden_states[i][0]
        return out.logits[0].argmax(-1), states


class InputFactory:
    """The same draft-round inputs for any set of aux layer ids: synthetic (seeded) or captured from a target."""

    def __init__(self, vocab_size: int, target_hidden: int, *, target: Target | None = None,
                 prompts: Sequence[Sequence[int]] | None = None, seed: int = 0, batch: int = 4, length: int = 8):
        self.vocab_size, self.target_hidden, self.target, self.seed = vocab_size, target_hidden, target, seed
        self.prompts = [list(p) for p in prompts] if prompts else None
        self._given = prompts is not None  # the description says whether the prompts were the user's
        self.batch, self.length = batch, length
        self._captured: dict[int, tuple[dict[int, torch.Tensor], int]] = {}
        if target is not None and self.prompts is None:
            g = torch.Generator().manual_seed(seed)
            self.prompts = torch.randint(0, target.vocab_size, (batch, length), generator=g).tolist()
        if target is not None:
            if target.hidden_size != target_hidden:
                raise UsageError(f"the target's hidden size {target.hidden_size} differs from the drafter's "
                                 f"target_hidden_size {target_hidden}")
            if target.vocab_size != vocab_size:
                raise UsageError(f"the target's vocabulary ({target.vocab_size}) differs from the drafter's ({vocab_size})")

    @property
    def description(self) -> str:
        if self.target is not None:
            assert self.prompts is not None
            return (f"target {self.target.path} (transformers, float32) on {len(self.prompts)} prompts "
                    f"({'given' if self._given else f'seeded random tokens, seed {self.seed}'})")
        return f"synthetic: seed {self.seed}, {self.batch} sequences of {self.length} tokens"

    def make(self, ids: Sequence[int]) -> list[DraftInputs]:
        ids = tuple(sorted(ids))
        if self.target is None:
            g = torch.Generator().manual_seed(self.seed)
            tokens = torch.randint(0, self.vocab_size, (self.batch, self.length + 1), generator=g)
            aux = torch.cat([synthetic_aux(self.seed, i, self.batch, self.length, self.target_hidden) for i in ids], -1)
            return [DraftInputs(tokens, aux, "synthetic", ids)]
        assert self.prompts is not None
        out = []
        for n, prompt in enumerate(self.prompts):
            states, nxt = self._states(n, prompt, ids)
            out.append(DraftInputs(torch.tensor([prompt + [nxt]]),
                                   torch.cat([states[i] for i in ids], -1).unsqueeze(0), "target", ids))
        return out

    def _states(self, n: int, prompt: list[int], ids: tuple[int, ...]) -> tuple[dict[int, torch.Tensor], int]:
        cached = self._captured.get(n)
        if cached is None or not set(ids) <= set(cached[0]):
            want = sorted(set(ids) | (set(cached[0]) if cached else set()))
            assert self.target is not None
            cached = self.target.run(prompt, want)
            self._captured[n] = cached
        return cached


def run_target(target: TargetModel, prompt: Sequence[int], layer_ids: Sequence[int]) -> tuple[dict[int, torch.Tensor], int]:
    """``Target.run`` for either runtime: checked ids, then the states and the greedy next token."""
    bad = [i for i in layer_ids if not 0 <= i <= target.num_layers]
    if bad:
        raise UsageError(f"aux layer ids {bad} are outside the target's 0..{target.num_layers}")
    if max(prompt) >= target.vocab_size:
        raise UsageError(f"prompt token {max(prompt)} is outside the target vocabulary ({target.vocab_size})")
    greedy, states = target.forward(prompt, layer_ids)
    return states, int(greedy[-1])


def capture_aux_states(target_dir: str | Path | Target, prompts: Sequence[Sequence[int]],
                       layer_ids: Sequence[int], *, save_to: str | Path | None = None,
                       overwrite: bool = False) -> list[dict[int, torch.Tensor]]:
    """Per prompt, the target's hidden states [T, Ht] at ``layer_ids`` (hidden_state_index numbering).

    ``save_to``: also write them as the calibration file ``upgrade --calibration`` reads (states in
    ascending layer order, each prompt's token ids and the target's greedy next token, the layer ids),
    staged and renamed into place; an existing file is refused unless ``overwrite``.
    """
    target = target_dir if isinstance(target_dir, Target) else Target(target_dir)
    runs = [target.run(p, layer_ids) for p in prompts]
    if save_to is not None:
        from ..readers.calibration import Calibration, write_calibration

        write_calibration(save_to, Calibration.from_runs(prompts, runs, layer_ids), overwrite=overwrite)
    return [states for states, _ in runs]
