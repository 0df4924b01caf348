"""The drafter as an engine serves it, for simulate's loops: the reference forward over the engine's view of the
checkpoint (``engines.view.serving_view``) and the target layers it captures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .report import SimulateError

if TYPE_CHECKING:
    from ..forward.protocols import DraftModel, TargetModel
    from ..config.target import TargetInfo


@dataclass(kw_only=True)
class EngineDrafter:
    """The drafter as the engine holds it: the reference forward over the engine's view, and the layers it captures."""

    model: DraftModel  # the engine's spec (flags, draft vocab), over the checkpoint's tensors and those the engine fills
    capture: tuple[int, ...]  # target layers captured, ascending and deduplicated (set membership in the runner)
    layers: tuple[int, ...]  # the same in the engine's order, repeats kept (llama.cpp concatenates them so)
    notes: list[str]


def engine_drafter(drafter: str | Path, engine: str, target: TargetModel, device: str = "cpu", *,
                   target_dir: str | Path | None = None) -> EngineDrafter:
    """Read ``drafter`` the way ``engine`` serves it (``engines.view.serving_view``: vLLM 0.32 rules with the V1
    runner, or llama.cpp's converter and runtime); raise where the engine fails, or drafts unpredictably.

    ``target_dir``: the target's directory, for the checks that read its config (llama.cpp's).
    """
    from ..support.bounds import check_memory
    from ..engines import resolve_engines
    from ..engines.view import serving_view
    from ..forward.api import default_aux_ids
    from ..forward.engine import fill_tensors, with_fills
    from ..forward.model import Drafter
    from ..forward.weights import BlockCache, CheckpointSource, ResidentSource
    from ..readers.loading import load_drafter

    profile = resolve_engines([engine])[0]
    if profile.serve is None:
        raise SimulateError(f"simulate models how {simulated_engines()} serve a drafter, not {profile.label}",
                            code=None)
    path = Path(drafter)
    if not sorted(path.glob("*.safetensors")):
        raise SimulateError(f"{path}: no *.safetensors file (simulate reads safetensors only)", code=None)
    loaded = load_drafter(path)
    loaded.store.close()  # the source maps the files itself
    check_memory(sum(i.numel for i in loaded.store.tensors.values()) * 4, "the drafter's weights in float32 (read "
                 "into memory for every round)", path, "its safetensors")
    intended = loaded.require_spec()
    L = target.num_layers
    view = serving_view(profile, loaded, default_aux_ids(intended, L), L,
                        target=target_info(target, target_dir) if target_dir is not None else None)
    if view.refused is not None or view.spec is None:
        raise SimulateError(f"{path}: {view.refused}", code=None)
    extra = fill_tensors(view.spec, view.fills, target.lm_head)
    # run every round: the checkpoint read into memory once, its blocks upcast (or uploaded to a GPU) once and kept
    model = Drafter(view.spec, ResidentSource(with_fills(CheckpointSource(loaded), extra)), dtype="float32",
                    target_embed=target.embed.float(), path=str(path), device=device, cache=BlockCache(1 << 40),
                    pack=profile.packs_linears)  # on the CPU: oneDNN with weights reordered once, as vLLM runs its linears
    return EngineDrafter(model=model, capture=view.capture, layers=view.layers, notes=view.notes)


def simulated_engines() -> str:
    """The engines simulate runs, as users name them: those whose default profile names a decode loop and models
    how the engine serves a drafter (``EngineProfile.decode_loop``, ``serve``)."""
    from ..engines import DEFAULTS, PROFILES

    return ", ".join(engine for engine, label in DEFAULTS.items()
                     if PROFILES[label].decode_loop is not None and PROFILES[label].serve is not None)


def target_info(target: TargetModel, target_dir: str | Path) -> TargetInfo:
    """The target's config for the engine checks that read it (llama.cpp's).  eagleconv's runtime runs only configs
    whose every field it understands, every number stated, so its own are the ones transformers' AutoConfig would
    give: no transformers import (``target.load_target``'s, most of simulate --engine llama.cpp's fixed cost)."""
    from ..forward.native_target import NativeTarget
    from ..config.target import TargetInfo, load_target

    if isinstance(target, NativeTarget):
        return TargetInfo(str(target_dir), target.architecture.name, target.hidden_size, target.vocab_size,
                          target.num_layers)
    return load_target(target_dir)
