"""The GGUF layout's writer (``GgufLayout.output``): llama.cpp's draft GGUF, as ``convert --to gguf`` writes it.

The plan names every tensor in GGUF terms and then names this writer's storage step (:meth:`GgufOutput.storage`),
which does what llama.cpp's converter does besides renaming, so the file holds what theirs holds; each change is
stated on the tensor's plan row:

- ``d2t`` as I64 absolute target ids (``d2t + arange``), checked in range of the target vocab and unique;
- the llama Q/K rows in ggml's rotary order (``LlamaModel.permute``), one head at a time;
- 1-D tensors (the norms) as F32: ggml multiplies F32 activations by them (the converter does the same);
- ``--outtype f32|f16|bf16`` converts the other float tensors, only when asked (each conversion is reported);
- the metadata: the drafter's hyper-parameters and flags, aux ids as ``eagle3.target_layers`` in llama.cpp's
  numbering (the input of layer id), and the target's tokenizer and layer count (``gguf_target``).

Tensors whose dtype is kept are copied by the kernel; the rest are streamed in bounded blocks, read from the source
(a ranged read) or from the bytes a transform computed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConversionError, UsageError
from ..io.checkpoint import Checkpoint
from ..io.dtypes import DTYPE_SIZES
from ..io.replaceable import Recognise
from ..io.writer import OutputTensor
from ..spec.drafter import DrafterSpec
from ..spec.report import ConvertReport, PlanRow
from .gguf_file import GgufCheckpoint, absolute_ids, copy_rope_rows, copy_rope_rows_kernel
from .gguf_keys import ARCH, KEYS, gguf_key
from .gguf_target import TargetMeta, read_target
from .gguf_writer import GgufTensor, KeyValue, StagedFile, header_writer, write_gguf

if TYPE_CHECKING:
    import gguf
    import numpy as np

    from ..io.finite import ValueScan

OUTTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
FLOATS = frozenset({"F32", "F16", "BF16"})
BLOCK_BYTES = 1 << 20


class GgufOutput:
    """One ``.gguf`` file, staged and published by one rename (``gguf_writer``); see the module docstring."""

    def __init__(self, target: TargetMeta, outtype: str | None):
        self.target, self.outtype = target, outtype
        self.notes: list[str] = []
        self._staged: StagedFile | None = None
        self._header: gguf.GGUFWriter | None = None

    @classmethod
    def prepare(cls, *, target: str | Path | None, outtype: str | None) -> GgufOutput:
        """--target is required (as llama.cpp's converter needs --target-model-dir) and read now, before anything
        is converted; --outtype is f32, f16 or bf16."""
        if target is None:
            raise UsageError("--to gguf needs --target TARGET (the target's .gguf or its HF directory): llama.cpp's "
                             "draft GGUF carries the target's tokenizer and layer count; nothing was written")
        if outtype is not None and outtype not in OUTTYPES:
            raise UsageError(f"--outtype {outtype!r}: choose one of {', '.join(OUTTYPES)}")
        return cls(read_target(target), outtype)

    def open(self, destination: str | Path, *, sources: Sequence[str | Path], overwrite: bool,
             durable: bool, recognise: Recognise | None = None) -> None:
        # One file: StagedFile checks the GGUF magic itself, so ``recognise`` (a directory's check) is not needed.
        self._staged = StagedFile(destination, overwrite=overwrite, durable=durable)
        self.notes = self._staged.notes

    def storage(self, store: Checkpoint, report: ConvertReport, tensors: list[OutputTensor],
                spec: DrafterSpec) -> list[GgufTensor]:
        """The planned tensors as llama.cpp stores them, and the header that lists them (its notes in the report)."""
        report.notes += self.target.notes
        written = _stored(store, report.plan, tensors, spec, self.target, self.outtype)
        self._header = metadata(store, spec, written, self.target, report.notes)
        return written

    def write(self, tensors: Sequence[OutputTensor], config: dict[str, Any], *, max_shard_size: int | None,
              on_bytes: Callable[[int], None] | None, verify: Callable[[Path], None],
              check_values: Callable[[OutputTensor, ValueScan], None] | None) -> list[str]:
        """Write the file (the config is in the header: ``storage`` built it); returns its name."""
        assert self._staged is not None and self._header is not None, "open() and storage() first"
        write_gguf(self._staged, self._header, tensors, on_bytes=on_bytes, check_values=check_values, verify=verify)
        return [self._staged.destination.name]


def _rope_heads(name: str, spec: DrafterSpec) -> int | None:
    if name.startswith("blk.") and name.endswith(".attn_q.weight"):
        return spec.num_attention_heads
    if name.startswith("blk.") and name.endswith(".attn_k.weight"):
        return spec.num_key_value_heads or spec.num_attention_heads
    return None


def _reader(store: Checkpoint, source: str | None, tensor: OutputTensor) -> Callable[[int, int], bytes]:
    """read(offset, size) of the tensor's bytes as the plan would write them: held in memory (computed, derived),
    else a ranged read of its source tensor."""
    data = tensor.data
    if data is not None:
        return lambda offset, size: data[offset:offset + size]
    if source is None:
        raise ConversionError(f"internal error: planned tensor {tensor.name} has neither bytes nor a source", store.path)
    return functools.partial(store.read_range, source)


def _convert(raw: bytes, src: str, dst: str) -> bytes:
    """``raw`` values of ``src`` as ``dst`` (F32/F16/BF16), rounding as llama.cpp's converter does (gguf.quants)."""
    import gguf
    import numpy as np

    if src == "BF16":
        values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        values = np.frombuffer(raw, dtype="<f2" if src == "F16" else "<f4").astype(np.float32)
    if dst == "F32":
        return values.astype("<f4").tobytes()
    if dst == "F16":
        return values.astype("<f2").tobytes()
    return np.asarray(gguf.quants.quantize(values, gguf.GGMLQuantizationType.BF16)).tobytes()


def _streamed(read: Callable[[int, int], bytes], tensor: OutputTensor, dtype: str) -> Callable[[int], None]:
    """Write ``tensor`` converted to ``dtype``, a block at a time."""
    from ..io.durable import write_all

    def write(fd: int) -> None:
        step = BLOCK_BYTES - BLOCK_BYTES % DTYPE_SIZES[tensor.dtype]
        for offset in range(0, tensor.nbytes, step):
            write_all(fd, _convert(read(offset, min(step, tensor.nbytes - offset)), tensor.dtype, dtype))
    return write


def _stored(store: Checkpoint, plan: list[PlanRow], tensors: Sequence[OutputTensor], spec: DrafterSpec,
            target: TargetMeta, outtype: str | None) -> list[GgufTensor]:
    """The plan's tensors as llama.cpp stores them (see the module docstring); each change goes on its plan row."""
    import numpy as np

    sources = {row.destination: row.source for row in plan if row.destination and row.action == "copy"}
    rows = {row.destination: row for row in plan if row.destination}
    wanted = OUTTYPES[outtype] if outtype else None
    out: list[GgufTensor] = []
    for t in tensors:
        read = _reader(store, sources.get(t.name), t)
        if t.name == "d2t":
            ids = absolute_ids(np.frombuffer(read(0, t.nbytes), dtype=_int_dtype(t.dtype)))
            _check_ids(ids, target.vocab_size, store.path)
            data = ids.astype("<i8").tobytes()
            out.append(GgufTensor(t.name, "I64", t.shape, len(data), _bytes(data)))
            _note(rows, t.name, "d2t + arange: llama.cpp stores absolute target ids (I64)")
            continue
        dtype = t.dtype
        if t.dtype in FLOATS and (len(t.shape) <= 1 or t.name.endswith("_norm.weight")):
            dtype = "F32"  # ggml multiplies F32 activations by norms
        elif t.dtype in FLOATS and wanted:
            dtype = wanted
        elif t.dtype not in FLOATS and t.dtype not in ("I64", "I32"):
            raise ConversionError(f"{t.name} is {t.dtype}; llama.cpp's draft GGUF holds F32/F16/BF16 weights "
                                  "(dequantise the drafter first)", store.path)
        nbytes = t.nbytes // DTYPE_SIZES[t.dtype] * DTYPE_SIZES[dtype]
        heads = _rope_heads(t.name, spec)
        if heads is not None:
            itemsize = DTYPE_SIZES[t.dtype]
            permuted = _rope_writer(read, t.shape, itemsize, heads, t.dtype, dtype,
                                    _kernel_copier(store, sources.get(t.name)))
            out.append(GgufTensor(t.name, dtype, t.shape, nbytes, permuted))
            _note(rows, t.name, "rows in ggml's rotary order (llama.cpp's LlamaModel.permute)")
        elif dtype != t.dtype:
            out.append(GgufTensor(t.name, dtype, t.shape, nbytes, _streamed(read, t, dtype)))
        else:
            out.append(GgufTensor(t.name, t.dtype, t.shape, t.nbytes, t.write))
        if dtype != t.dtype:
            why = "--outtype" if dtype == wanted and len(t.shape) > 1 else "1-D: llama.cpp multiplies F32 activations by it"
            _note(rows, t.name, f"{t.dtype} -> {dtype} ({why})")
    return out


def _kernel_copier(store: Checkpoint, source: str | None) -> Callable[[int, int, int], None] | None:
    """copy(offset, size, fd) of a copied tensor's stored bytes, where the file holds them as read (else None: a
    GGUF source serves its Q/K rows reordered, a pickle or state dict is in memory)."""
    if source is None or isinstance(store, GgufCheckpoint) or store.in_memory:
        return None
    return functools.partial(store.copy_range_into, source)


def _rope_writer(read: Callable[[int, int], bytes], shape: tuple[int, ...], itemsize: int, heads: int,
                 src: str, dst: str, kernel: Callable[[int, int, int], None] | None) -> Callable[[int], None]:
    def write(fd: int) -> None:
        if src == dst and kernel is not None:
            copy_rope_rows_kernel(kernel, shape, itemsize, heads, fd)
            return
        convert = None if src == dst else (lambda raw: _convert(raw, src, dst))
        copy_rope_rows(read, shape, itemsize, heads, fd, to_gguf=True, convert=convert)
    return write


def _int_dtype(dtype: str) -> str:
    return {"I64": "<i8", "I32": "<i4"}.get(dtype, "<i8")


def _bytes(data: bytes) -> Callable[[int], None]:
    from ..io.durable import write_all

    return lambda fd: write_all(fd, data)


def _note(rows: dict, name: str, what: str) -> None:
    row = rows.get(name)
    if row is not None:
        row.reason = f"{row.reason}; {what}" if row.reason else what


def _check_ids(ids: np.ndarray, vocab: int, path: str | Path) -> None:
    import numpy as np

    bad = np.flatnonzero((ids < 0) | (ids >= vocab))
    if bad.size:
        raise ConversionError(f"d2t maps draft token {int(bad[0])} to target id {int(ids[bad[0]])}, outside the "
                              f"target vocab of {vocab} (llama.cpp's converter refuses it too)", path,
                              code="EC030")
    if np.unique(ids).size != ids.size:
        raise ConversionError("d2t maps two draft tokens to one target id (llama.cpp's converter refuses it too)",
                              path, code="EC030")


def target_layers(spec: DrafterSpec, target: TargetMeta, notes: list[str]) -> list[int]:
    """eagle3.target_layers in llama.cpp's numbering (the input of layer id: hidden_state_index)."""
    ids = spec.aux.ids_as("hidden_state_index")
    n = target.num_layers
    if ids is None:
        chosen = [2, n // 2, n - 3]
        notes.append(f"the source records no aux layer ids: eagle3.target_layers = {chosen}, llama.cpp's converter's "
                     f"default for a {n}-layer target ([2, N//2, N-3]); pass --aux-layer-ids if the drafter was "
                     "trained on others")
        ids = tuple(chosen)  # a target of under 3 layers gives an id below 0: refused below, not written
    elif spec.aux.convention != "hidden_state_index":
        notes.append(f"aux layer ids {list(spec.aux.ids or [])} ({spec.aux.convention}) written as "
                     f"eagle3.target_layers = {list(ids)} (llama.cpp reads the input of layer id)")
    bad = [i for i in ids if not 0 <= i <= n]
    if bad:
        raise ConversionError(f"aux layer ids {list(ids)} (hidden_state_index) fall outside the target's {n} layers",
                              None, code="EC013")
    return list(ids)


def metadata(store: Checkpoint, spec: DrafterSpec, tensors: Sequence[GgufTensor], target: TargetMeta,
             notes: list[str]) -> gguf.GGUFWriter:
    """A gguf.GGUFWriter holding the keys llama.cpp's converter writes, in its order, and the tensor table."""
    import gguf

    V = gguf.GGUFValueType
    if spec.rope.scaling != "none":
        raise ConversionError(f"rope scaling {spec.rope.scaling!r}: eagleconv writes llama.cpp drafts without RoPE "
                              "scaling only", store.path)
    if spec.target_hidden_size != target.hidden_size:
        raise ConversionError(f"the drafter reads target hidden states of width {spec.target_hidden_size}; the "
                              f"--target has hidden size {target.hidden_size}", store.path, code="EC052")
    if spec.rms_norm_eps is None:
        raise ConversionError("rms_norm_eps is unknown (neither the config nor the layout states it); llama.cpp "
                              "needs it", store.path, code="EC004")
    if spec.vocab_size != target.vocab_size:
        notes.append(f"the drafter's vocab_size {spec.vocab_size} differs from the target's {target.vocab_size}")
    head_dim = spec.head_dim or spec.hidden_size // spec.num_attention_heads
    kv: list[KeyValue] = [
        KeyValue(gguf_key(KEYS["eagle_aux_hidden_state_layer_ids"]), target_layers(spec, target, notes), V.ARRAY, V.INT32),
        KeyValue(gguf_key(KEYS["target_hidden_size"]), spec.target_hidden_size, V.UINT32),
        KeyValue(gguf_key(KEYS["norm_before_residual"]), spec.flags.norm_before_residual, V.BOOL),
        KeyValue(gguf_key(KEYS["norm_before_fc"]), spec.flags.norm_before_fc, V.BOOL),
    ]
    writer = header_writer(ARCH, kv, tensors)
    total = writer.get_total_parameter_count()
    source = Path(store.path)
    card_dir = source if source.is_dir() else None
    meta = gguf.Metadata.load(None, card_dir, None, total[0])
    if meta.name is None:
        meta.name = source.name if source.is_dir() else source.stem
    if meta.size_label is None and total[0] > 0:
        meta.size_label = gguf.size_label(*total)
    writer.add_type(gguf.GGUFType.MODEL)
    meta.set_gguf_meta_model(writer)
    writer.add_block_count(spec.num_hidden_layers)
    if spec.max_position_embeddings is not None:
        writer.add_context_length(spec.max_position_embeddings)
    writer.add_embedding_length(spec.hidden_size)
    writer.add_feed_forward_length(spec.intermediate_size)
    writer.add_head_count(spec.num_attention_heads)
    writer.add_head_count_kv(spec.num_key_value_heads or spec.num_attention_heads)
    if spec.rope.theta is not None:
        writer.add_rope_freq_base(spec.rope.theta)
    writer.add_layer_norm_rms_eps(spec.rms_norm_eps)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_file_type(_file_type(tensors))
    writer.add_vocab_size(spec.vocab_size)
    writer.add_rope_dimension_count(head_dim)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for item in target.tokenizer_keys(spec.vocab_size):
        writer.add_key_value(item.key, item.value, item.type, item.sub_type)
    return writer


def _file_type(tensors: Sequence[GgufTensor]) -> int:
    """general.file_type from the 2-D tensors' dtype (as llama.cpp's converter states its --outtype)."""
    import gguf

    sizes: dict[str, int] = {}
    for t in tensors:
        if len(t.shape) > 1 and t.dtype in FLOATS:
            sizes[t.dtype] = sizes.get(t.dtype, 0) + t.nbytes
    main = max(sizes, key=lambda d: sizes[d]) if sizes else "F32"
    return int({"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                "BF16": gguf.LlamaFileType.MOSTLY_BF16}[main])
