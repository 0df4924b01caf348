"""The calibration file: captured aux states (and the tokens they came from) that upgrade and downgrade fit to.

Written by ``capture_aux_states(save_to=...)`` and read by ``upgrade`` / ``downgrade --calibration FILE``.
A data file, below both the forward (which captures) and the transforms (which read), so neither imports the other.
"""

from __future__ import annotations

import math

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FormatError, UsageError
from ..io.dtypes import INT_DTYPES
from ..io.safetensors_header import build_header, read_header
from ..io.staging import write_file_atomically

if TYPE_CHECKING:
    import torch

    from ..spec.drafter import DrafterSpec
    from ..io.safetensors_header import SafetensorsHeader

# The calibration file (``--calibration FILE``, written by ``capture_aux_states(save_to=...)``) is one
# safetensors file.  Required: ``aux_hidden_states``, one row per token, [N, K*Ht] or [N, K, Ht] (any
# leading dims: [S, T, ...] is S sequences of T tokens), the K states in the drafter's aux order.
# Optional, for measuring the divergence on the drafter's real inputs: ``input_ids`` [N] (the token the
# target read at each row), ``next_token_ids`` [S] (per sequence, the token after its last row: the
# target's greedy one), ``sequence_lengths`` [S] (rows per sequence, summing to N); metadata
# ``aux_layer_ids`` (JSON list).  Readers that know only ``aux_hidden_states`` ignore the rest.

CALIBRATION_KEY = "aux_hidden_states"
TOKENS_KEY = "input_ids"
NEXT_TOKENS_KEY = "next_token_ids"
LENGTHS_KEY = "sequence_lengths"
LAYERS_METADATA = "aux_layer_ids"
FLOAT_STATES = ("F16", "BF16", "F32", "F64")


@dataclass
class Calibration:
    """Captured aux states and, when known, the token sequences they came from.

    ``states``: [N, K*Ht] as captured (rows of all sequences, concatenated); ``lengths``: rows per
    sequence; ``tokens``: per sequence x_0..x_T (its T tokens, then the target's next one), the token ids
    the drafter embeds next to each state (None: the file has none).
    """

    states: torch.Tensor
    lengths: list[int]
    tokens: list[torch.Tensor] | None = None
    layer_ids: tuple[int, ...] | None = None
    origin: str = ""  # where they came from, for the report: the file, or the target on the prompts

    @classmethod
    def from_runs(cls, prompts: Sequence[Sequence[int]], runs: Sequence[tuple[Mapping[int, torch.Tensor], int]],
                  layer_ids: Sequence[int], origin: str = "") -> Calibration:
        """From ``Target.run`` per prompt (states by layer id, greedy next token): the states in ascending layer order."""
        import torch

        if not runs:
            raise UsageError("no prompts: there are no states to capture")
        ids = tuple(sorted(layer_ids))
        states = torch.cat([torch.cat([got[i] for i in ids], -1) for got, _ in runs], 0)
        tokens = [torch.tensor([*prompt, nxt], dtype=torch.int64) for prompt, (_, nxt) in zip(prompts, runs, strict=True)]
        return cls(states, [len(prompt) for prompt in prompts], tokens, ids, origin)

    def per_state(self, count: int) -> torch.Tensor:
        """[N, K, Ht] float64: what the weight fits read."""
        return self.states.double().reshape(self.states.shape[0], count, -1)


def write_calibration(path: str | Path, calibration: Calibration, *, overwrite: bool = False) -> Path:
    """The calibration file ``load_calibration`` reads, written whole or not at all (io.staging.write_file_atomically)."""
    import json

    import torch

    from ..io.torch_tensors import tensor_bytes

    tensors = {CALIBRATION_KEY: calibration.states, LENGTHS_KEY: torch.tensor(calibration.lengths, dtype=torch.int64)}
    if calibration.tokens is not None:
        tensors[TOKENS_KEY] = torch.cat([t[:-1] for t in calibration.tokens]).to(torch.int64)
        tensors[NEXT_TOKENS_KEY] = torch.stack([t[-1] for t in calibration.tokens]).to(torch.int64)
    parts = {name: tensor_bytes(t) for name, t in tensors.items()}
    metadata = {LAYERS_METADATA: json.dumps(list(calibration.layer_ids))} if calibration.layer_ids else None
    prefix, _ = build_header([(n, d, s, len(b)) for n, (d, s, b) in parts.items()], metadata)
    return write_file_atomically(path, [prefix, *(data for _, _, data in parts.values())],
                                 what="the calibration file", overwrite=overwrite)


def _read_tensor(path: Path, header: SafetensorsHeader, name: str) -> torch.Tensor:
    import torch

    from ..io.torch_tensors import torch_dtype

    entry = header.entries[name]
    with open(path, "rb") as f:
        f.seek(entry.start)
        data = bytearray(f.read(entry.end - entry.start))
    dtype = torch_dtype(entry.dtype)
    return (torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)).reshape(entry.shape)


def _integers(path: Path, header: SafetensorsHeader, name: str) -> torch.Tensor:
    """A stored integer tensor, flattened, as int64."""
    entry = header.entries[name]
    if entry.dtype not in INT_DTYPES:
        raise FormatError(f"{name} is {entry.dtype}; it holds integers", path)
    return _read_tensor(path, header, name).reshape(-1).long()


def _token_ids(path: Path, header: SafetensorsHeader, name: str, count: int, vocab_size: int) -> torch.Tensor:
    """``count`` token ids inside the target vocabulary."""
    ids = _integers(path, header, name)
    if ids.numel() != count:
        raise FormatError(f"{name} holds {ids.numel()} ids; {count} expected", path)
    if not (0 <= int(ids.min()) and int(ids.max()) < vocab_size):
        raise FormatError(f"{name} has ids {int(ids.min())}..{int(ids.max())}, outside the target vocabulary "
                          f"0..{vocab_size - 1}", path)
    return ids


def _layer_ids(path: Path, text: str | None, count: int) -> tuple[int, ...] | None:
    """The ``aux_layer_ids`` metadata: a JSON list of ``count`` distinct non-negative integers, ascending."""
    import json

    if text is None:
        return None
    try:
        ids = json.loads(text)
    except ValueError:
        ids = None
    if not (isinstance(ids, list) and len(ids) == count and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids) and ids == sorted(set(ids))):
        raise FormatError(f"metadata {LAYERS_METADATA} is {text[:40]!r}; expected a JSON list of {count} ascending "
                          "layer ids", path)
    return tuple(ids)


def load_calibration(path: str | Path, spec: DrafterSpec) -> Calibration:
    """The calibration file (format above) for this drafter, every field checked: a FormatError naming the file."""
    import torch

    K, Ht = spec.aux.count, spec.target_hidden_size
    path = Path(path)
    if not path.is_file():
        raise FormatError("no such calibration file", path)
    from ..support.bounds import MAX_CALIBRATION_BYTES, check_file_size, check_memory

    check_file_size(path, "the calibration file", MAX_CALIBRATION_BYTES)
    header = read_header(path)  # the strict parser every checkpoint goes through
    entry = header.entries.get(CALIBRATION_KEY)
    if entry is None:
        raise FormatError(f"no {CALIBRATION_KEY!r} tensor (found: {', '.join(sorted(header.entries)[:5]) or 'none'})",
                          path)
    if entry.dtype not in FLOAT_STATES:
        raise FormatError(f"{CALIBRATION_KEY} is {entry.dtype}; captured states are floating point", path)
    shape = entry.shape
    if shape and shape[-1] == K * Ht:
        leading = shape[:-1]
    elif len(shape) >= 2 and tuple(shape[-2:]) == (K, Ht):
        leading = shape[:-2]
    else:
        raise FormatError(f"{CALIBRATION_KEY} has shape {list(shape)}; this drafter needs [..., {K * Ht}] or "
                          f"[..., {K}, {Ht}] (K = {K} aux states of width {Ht})", path)
    elements = math.prod(shape)
    # read as stored, then float64 for the fits (and a copy while they run): refused before a byte is read
    check_memory(entry.end - entry.start + elements * 16, f"{CALIBRATION_KEY} {list(shape)}", path, CALIBRATION_KEY)
    states = _read_tensor(path, header, CALIBRATION_KEY).reshape(-1, K * Ht)
    N = states.shape[0]
    if N == 0:
        raise FormatError(f"{CALIBRATION_KEY} holds no tokens", path)
    if not bool(states.isfinite().all()):
        raise FormatError(f"{CALIBRATION_KEY} has NaN or Inf values", path)
    zero = [i for i in range(K) if not bool(states[:, i * Ht:(i + 1) * Ht].any())]
    if zero:  # no scale to preserve and nothing to fit fc to (the normal equations are singular): refused
        raise FormatError(f"{CALIBRATION_KEY}: aux state{'s' if len(zero) > 1 else ''} {zero} are all zero in every "
                          "token; calibration needs the target's captured states (capture_aux_states)", path)
    if LENGTHS_KEY in header.entries:
        lengths = _integers(path, header, LENGTHS_KEY).tolist()
        if not lengths or min(lengths) < 1 or sum(lengths) != N:
            raise FormatError(f"{LENGTHS_KEY} {lengths[:8]} must be positive and sum to the {N} rows of "
                              f"{CALIBRATION_KEY}", path)
    else:  # [S, T, ...]: S sequences of T rows; [N, ...]: one sequence
        lengths = [leading[-1]] * (N // leading[-1]) if len(leading) >= 2 else [N]
    tokens = None
    if (TOKENS_KEY in header.entries) != (NEXT_TOKENS_KEY in header.entries):
        have, lack = (TOKENS_KEY, NEXT_TOKENS_KEY) if TOKENS_KEY in header.entries else (NEXT_TOKENS_KEY, TOKENS_KEY)
        raise FormatError(f"{have} without {lack}: the drafter embeds the token after each row, so both are needed",
                          path)
    if TOKENS_KEY in header.entries:
        ids = _token_ids(path, header, TOKENS_KEY, N, spec.vocab_size)
        nxt = _token_ids(path, header, NEXT_TOKENS_KEY, len(lengths), spec.vocab_size)
        tokens = [torch.cat([part, nxt[n:n + 1]]) for n, part in enumerate(ids.split(lengths))]
    layer_ids = _layer_ids(path, header.metadata.get(LAYERS_METADATA), K)
    stated = spec.aux.ids_as("hidden_state_index")
    if layer_ids is not None and stated is not None and tuple(sorted(stated)) != layer_ids:
        raise FormatError(f"the states were captured at target layers {list(layer_ids)}; this drafter reads "
                          f"{sorted(stated)}", path)
    return Calibration(states, lengths, tokens, layer_ids, str(path))
