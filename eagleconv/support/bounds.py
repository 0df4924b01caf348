"""The sizes a config makes eagleconv allocate, bounded before anything is allocated (issue 28).

One config line (``"num_hidden_layers": 1000000000``) used to make ``validate`` build a billion tensor names and
``simulate`` a KV cache of any size.  Every reader of a config (the drafter's, :func:`check_config`, called by
``io.reader``, ``jsonio.config_dict``'s callers, ``lint``, ``push``; the target's, ``target.read_target_config``)
and every command that allocates from one (``simulate``: :func:`check_decode`; ``upgrade --calibration``, the
prompts files: :data:`MAX_INPUT_BYTES`) calls in here first.  Over a limit below, or over the memory this machine
can give the process, is one :class:`~eagleconv.errors.UnsafeInputError` naming the file and the field: exit 2,
nothing allocated.  The limits are documented in docs/security.md; each is far above any published
model (noted beside it), so no real checkpoint meets one.
"""

from __future__ import annotations

import os
import resource
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnsafeInputError

# -- the limits (docs/security.md) --------------------------------------------------------------------------------
MAX_LAYERS = 1024  # num_hidden_layers and the like; the deepest published decoder has 126 (Llama 3.1 405B)
MAX_HEADS = 4096  # attention and KV heads; 128 published
MAX_DIM = 1 << 20  # hidden, intermediate, head and LoRA dims; 53,248 published (Llama 3.1 405B's MLP)
MAX_VOCAB = 1 << 23  # vocab_size, draft_vocab_size; 262,144 published (Gemma 3)
MAX_POSITIONS = 1 << 24  # max_position_embeddings; 10M published (Llama 4 Scout)
MAX_AUX = 64  # aux layer ids / aux hidden states; EAGLE-3 drafters use 3
MAX_TENSOR_NAMES = 1 << 16  # canonical tensor names a config implies (layers x per-layer tensors + aux norms)
MAX_PROMPT_TOKENS = 1 << 20  # tokens over all prompts of a prompts file or a library call
MAX_MAX_TOKENS = 1 << 20  # simulate --max-tokens
MAX_SPECULATIVE_TOKENS = 64  # simulate --num-speculative-tokens; vLLM runs single digits
MAX_PROMPTS_BYTES = 16 * 1024 * 1024  # a prompts file (JSON: Python's lists take ~18x its bytes)
MAX_CALIBRATION_BYTES = 16 * 1024 ** 3  # an upgrade --calibration file (also held to the memory it needs)
MEMORY_SHARE = 0.8  # of the memory available to the process, what one allocation from a config may take
# A GGUF header (gguf.gguf_file.read_header): what its metadata may make eagleconv hold.  A target's tokenizer is the
# largest published content: Gemma 3's 262,144 tokens are ~0.8M array elements (tokens, scores, types) and ~4 MiB
# of text; llama 3's adds 280,147 merges.
MAX_GGUF_KEYS = 1 << 16  # metadata keys; llama.cpp's converter writes ~50
MAX_GGUF_TENSORS = 1 << 16  # tensor table entries; a 405B target has ~1,100
MAX_GGUF_ELEMENTS = 1 << 22  # array elements in one header, read or walked (a 256k-vocab tokenizer: ~0.8M)
MAX_GGUF_TEXT = 1 << 26  # bytes of strings decoded in one header (a 256k-vocab tokenizer: ~4-8 MiB)

_TENSORS_PER_LAYER = 16  # a decoder layer's most tensors (MLA with biases: 13); the shared ones are a handful

# field name -> (limit, what it counts); fields are matched by name at any depth of the config
_EXACT = {"max_position_embeddings": (MAX_POSITIONS, "positions"),
          "original_max_position_embeddings": (MAX_POSITIONS, "positions"),
          "num_aux_hidden_states": (MAX_AUX, "aux hidden states")}


def _limit_of(key: str) -> tuple[int, str] | None:
    """The bound on an integer field named ``key``, or None for a field that sizes nothing."""
    if key in _EXACT:
        return _EXACT[key]
    if key.endswith("vocab_size"):
        return MAX_VOCAB, "tokens"
    if key.endswith("layers") or key == "n_layer":
        return MAX_LAYERS, "layers"
    if key.endswith("heads") or key == "n_head":
        return MAX_HEADS, "heads"
    if key.endswith(("_size", "_dim", "_rank")) and not key.endswith(("batch_size", "window_size", "chunk_size")):
        return MAX_DIM, "elements"
    return None


def _is_aux_list(key: str) -> bool:
    return key.endswith("layer_ids") or key in ("aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids")


def _walk(config: Mapping[str, object], path: str = "") -> Iterator[tuple[str, str, object]]:
    """(dotted path, key, value) for every key of ``config`` and its nested objects (depth bounded by jsonio)."""
    for key, value in config.items():
        if not isinstance(key, str):
            continue
        where = f"{path}.{key}" if path else key
        yield where, key, value
        if isinstance(value, Mapping):
            yield from _walk(value, where)


def refuse(message: str, source: str | Path | None) -> UnsafeInputError:
    return UnsafeInputError(message, source)


@dataclass(frozen=True)
class ConfigSizes:
    """What a config implies eagleconv may build from it (the largest stated value of each kind)."""

    layers: int = 0
    aux: int = 0
    tensor_names: int = 0


def check_config(config: Mapping[str, object], source: str | Path | None = None,
                 spelled: Mapping[str, str] | None = None) -> ConfigSizes:
    """Refuse a config (drafter or target) whose stated sizes are over the limits; what it implies otherwise.

    Every integer field that sizes something is bounded by name at any depth (speculators'
    ``transformer_layer_config``, ``eagle_config``, a target's ``text_config``); aux id lists by length; and
    the tensor names the layers imply.  Non-integers are left to the typed checks that follow.  ``spelled``:
    how the source spells a top-level field (a GGUF's ``eagle3.block_count`` for ``num_hidden_layers``).
    """
    layers = aux = 0
    for where, key, value in _walk(config):
        where = spelled.get(where, where) if spelled else where
        if isinstance(value, list) and _is_aux_list(key):
            if len(value) > MAX_AUX:
                raise refuse(f"{where} lists {len(value)} layer ids; eagleconv reads at most {MAX_AUX} "
                             "(EAGLE-3 drafters capture 3)", source)
            aux = max(aux, len(value))
            for item in value:
                if isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_LAYERS:
                    raise refuse(f"{where} holds layer id {item}, beyond eagleconv's limit of {MAX_LAYERS} layers",
                                 source)
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        bound = _limit_of(key)
        if bound is not None and value > bound[0]:
            raise refuse(f"{where} = {value} is over eagleconv's limit of {bound[0]} {bound[1]} (docs/security.md)",
                         source)
        if bound is not None and bound[1] == "layers":
            layers = max(layers, value)
        if key == "num_aux_hidden_states":
            aux = max(aux, value)
    names = layers * _TENSORS_PER_LAYER + aux + 8
    if names > MAX_TENSOR_NAMES:  # unreachable under the limits above; kept so a raised limit cannot skip it
        raise refuse(f"the config implies {names} tensor names, over eagleconv's limit of {MAX_TENSOR_NAMES}", source)
    return ConfigSizes(layers, aux, names)


# -- memory --------------------------------------------------------------------------------------------------------

def available_memory() -> int:
    """Bytes this process can still allocate: MemAvailable (Linux), lowered by an address-space rlimit."""
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = 1 << 62
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = _address_space()
        avail = min(avail, max(0, soft - used))
    return avail


def _address_space() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def check_memory(nbytes: int, what: str, source: str | Path | None, field: str) -> None:
    """Refuse an allocation of ``nbytes`` (for ``what``, sized by ``field``) the machine cannot hold."""
    avail = available_memory()
    if nbytes > MEMORY_SHARE * avail:
        raise refuse(f"{field}: {what} would take {_size(nbytes)}, more than this machine can give "
                     f"({_size(avail)} available)", source)


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    raise AssertionError  # pragma: no cover


def check_file_size(path: str | Path, what: str, limit: int = MAX_PROMPTS_BYTES) -> int:
    """Refuse a regular file over ``limit`` bytes before reading it; its size (0 for a pipe or a device, which
    :func:`read_capped` reads to at most ``limit``)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        return 0  # the reader reports it, naming the file
    if stat.S_ISREG(st.st_mode) and st.st_size > limit:
        raise refuse(f"{what} is {_size(st.st_size)}, over eagleconv's limit of {_size(limit)} (docs/security.md)", p)
    return st.st_size


def read_capped(path: str | Path, what: str, limit: int = MAX_PROMPTS_BYTES) -> bytes:
    """The bytes of ``path`` (a file, a pipe, ``/dev/stdin``), refused past ``limit`` (``/dev/zero`` included)."""
    check_file_size(path, what, limit)
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise refuse(f"{what} holds more than eagleconv's limit of {_size(limit)} (docs/security.md)", path)
    return data


# -- what decoding allocates ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelDims:
    """The numbers of a model (target or drafter) that size its KV cache and logits."""

    source: str
    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    hidden: int
    max_positions: int | None


def check_prompts_size(prompts: Sequence[Sequence[int]], source: str | Path | None) -> None:
    total = sum(len(p) for p in prompts)
    if total > MAX_PROMPT_TOKENS:
        raise refuse(f"the prompts hold {total} tokens, over eagleconv's limit of {MAX_PROMPT_TOKENS}", source)


def check_decode_arguments(max_tokens: int, k: int) -> None:
    """simulate's --max-tokens and --num-speculative-tokens against their limits."""
    if max_tokens > MAX_MAX_TOKENS:
        raise refuse(f"--max-tokens {max_tokens} is over eagleconv's limit of {MAX_MAX_TOKENS}", None)
    if k > MAX_SPECULATIVE_TOKENS:
        raise refuse(f"--num-speculative-tokens {k} is over eagleconv's limit of {MAX_SPECULATIVE_TOKENS}", None)


def check_decode(target: ModelDims, drafter: ModelDims | None, prompts: Sequence[Sequence[int]],
                 max_tokens: int, k: int, prompts_source: str | Path | None = None) -> None:
    """What ``simulate`` allocates, checked before it does: the arguments, then every prompt against the target's
    ``max_position_embeddings`` (vLLM's max_model_len when none is given: a prompt of max_model_len tokens or more
    is refused, as vLLM's input processor refuses it; generation stopping there is the caller's), then the KV
    caches and the logits against the machine's memory.  The drafter's max_position_embeddings does not limit:
    vLLM raises it to the target's max_model_len (config/speculative.py)."""
    check_decode_arguments(max_tokens, k)
    check_prompts_size(prompts, prompts_source)
    longest = max(len(p) for p in prompts)
    limit = target.max_positions
    if limit is not None and longest >= limit:
        n = max(range(len(prompts)), key=lambda i: len(prompts[i]))
        raise refuse(f"prompt {n} is {longest} tokens, which leaves no room for output within max_position_embeddings "
                     f"{limit} of {target.source} (vLLM refuses a prompt of max_model_len tokens or more)",
                     prompts_source)
    rows = longest + max_tokens + k
    if limit is not None:
        rows = min(rows, limit + k)
    for dims, layers in ((target, target.layers), (drafter, drafter.layers if drafter else 0)):
        if dims is None:
            continue
        kv = 2 * layers * dims.kv_heads * dims.head_dim * rows * len(prompts) * 4
        check_memory(kv, f"the KV cache of {dims.source} ({len(prompts)} prompts x {rows} positions)", dims.source,
                     "--max-tokens / --num-speculative-tokens / the prompts")
    # logits: one prompt's whole sequence at once (the transformers runtime re-runs it each round), or every
    # prompt's K+1 verified rows in one batched step (eagleconv's cached runtime)
    logit_rows = max(rows, len(prompts) * (k + 1))
    check_memory(target.vocab * logit_rows * 4, f"the target's logits ({target.vocab} x {logit_rows} rows)",
                 prompts_source or target.source, "the prompts")
