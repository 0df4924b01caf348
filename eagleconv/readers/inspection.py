"""``eagleconv inspect``: what a checkpoint is, from headers and small vectors only."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArgumentTypeError
from ..hubread.remote import open_hf_headers, reads_headers
from ..io.remote import needs_download
from .loading import load_drafter, read_store
from ..spec.report import FlagsView, InspectReport, TensorRow, VocabSummary


def inspect(path: str | Path, *, from_format: str | None = None, allow_pickle: bool = False,
            download: bool = False) -> InspectReport:
    """Describe the drafter at ``path``: layout, EAGLE version, flags, dims, aux ids, vocab, tensors.

    ``hf://`` is read from its config, index and headers (``report.hub``: commit, bytes); ``download``
    fetches the whole snapshot instead.
    """
    ArgumentTypeError.require_path(path, "path")
    hub = None
    if reads_headers(path, download):
        if allow_pickle:
            raise needs_download("--allow-pickle", str(path))
        remote, hub = open_hf_headers(str(path))
        loaded = read_store(remote, layout=from_format)
    else:
        loaded = load_drafter(path, layout=from_format, allow_pickle=allow_pickle)
    try:
        spec = loaded.require_spec()
        store, read = loaded.store, loaded.read
        rows = [TensorRow(name=i.name, shape=list(i.shape), dtype=i.dtype, bytes=i.nbytes, file=i.file)
                for i in sorted(store.tensors.values(), key=lambda i: i.name)]
        ids = spec.aux.ids_as("hidden_state_index")
        return InspectReport(
            path=store.label,
            format=loaded.layout.name,
            detected_by=loaded.detected_by,
            eagle_version=spec.eagle_version,
            eagle31_flags=spec.flags.eagle31_flags,
            architecture=spec.architecture,
            flags=FlagsView(**spec.flags.model_dump()),
            aux_layer_ids=list(spec.aux.ids) if spec.aux.ids is not None else None,
            aux_layer_convention=spec.aux.convention,
            aux_layer_ids_hidden_state_index=list(ids) if ids is not None else None,
            num_aux_hidden_states=spec.aux.count,
            vocab=VocabSummary(target_vocab_size=spec.vocab_size, draft_vocab_size=spec.draft_vocab_size,
                               compressed=spec.compressed_vocab, d2t="d2t" in read.tensors, t2d="t2d" in read.tensors),
            weights=store.weights_kind,
            files=store.files,
            total_bytes=sum(r.bytes for r in rows),
            tensors=rows,
            notes=read.notes + store.notes,
            spec=spec,
            hub=hub() if hub is not None else None,
        )
    finally:
        loaded.close()
