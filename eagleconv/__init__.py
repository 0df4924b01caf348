"""eagleconv: convert and validate EAGLE-3 / EAGLE-3.1 speculative-decoding drafter checkpoints.

The public API is re-exported here lazily, so ``import eagleconv`` (and the
CLI's ``--help``) stays fast and never imports torch.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .io import hooks as _io_hooks

__version__ = "0.1.0"

_EXPORTS = {
    "convert": "eagleconv.conversion",
    "plan_conversion": "eagleconv.conversion",
    "inspect": "eagleconv.inspection",
    "upgrade": "eagleconv.eagle31",
    "downgrade": "eagleconv.eagle31",
    "TransformReport": "eagleconv.report",
    "validate": "eagleconv.validation",
    "lint": "eagleconv.validation",
    "load_drafter": "eagleconv.loading",
    "load": "eagleconv.forward",
    "diff": "eagleconv.forward",
    "capture_aux_states": "eagleconv.forward",
    "Drafter": "eagleconv.forward",
    "DiffReport": "eagleconv.report",
    "ForwardReport": "eagleconv.report",
    "LoadedDrafter": "eagleconv.loading",
    "DrafterSpec": "eagleconv.drafter",
    "AuxLayers": "eagleconv.drafter",
    "EagleFlags": "eagleconv.drafter",
    "MlaDims": "eagleconv.drafter",
    "ConvertReport": "eagleconv.report",
    "InspectReport": "eagleconv.report",
    "Finding": "eagleconv.report",
    "ValidationReport": "eagleconv.report",
    "push": "eagleconv.hub",
    "pull": "eagleconv.hub",
    "PushReport": "eagleconv.hub",
    "PullReport": "eagleconv.hub",
    "open_checkpoint": "eagleconv.io.reader",
    "LAYOUTS": "eagleconv.formats",
    "EagleconvError": "eagleconv.errors",
    "ConversionError": "eagleconv.errors",
    "FormatError": "eagleconv.errors",
    "FindingsError": "eagleconv.errors",
    "UnsafeInputError": "eagleconv.errors",
    "UsageError": "eagleconv.errors",
    "ArgumentTypeError": "eagleconv.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def _fetch_hf(path: str) -> Path:
    """``hf://`` -> the verified snapshot, for io (``io.hub_paths.local_path``); the hub is imported only when used."""
    fetched: Path = import_module("eagleconv.hub").fetch_verified(path)
    return fetched


def _open_hf_headers(path: str, duplicates: Any = None, **options: Any) -> tuple[Any, Any]:
    """``hf://`` read from its headers, for validate / inspect / lint (``eagleconv.hub.open_hf_headers``)."""
    opened: tuple[Any, Any] = import_module("eagleconv.hub").open_hf_headers(path, duplicates, **options)
    return opened


def _recognise_checkpoint(directory: Path, names: list[str], shown: str | Path) -> None:
    """For io's --overwrite check (``io.staging.check_replaceable``): a drafter checkpoint by content, or UsageError."""
    import_module("eagleconv.loading").recognise_checkpoint(directory, names, shown)


def _gguf_config(kv: Any, tensors: Any) -> dict[str, Any]:
    """For io's GGUF reader (``io.gguf_file.open_gguf``): the GGUF layout's metadata -> config.json view."""
    config: dict[str, Any] = import_module("eagleconv.formats.gguf").config_from_kv(kv, tensors)
    return config


# The one place that wires a lower layer to a higher one: io needs the hub (hf:// paths) and layout detection
# (what --overwrite may replace) without importing either.
_io_hooks.fetch_hf = _fetch_hf
_io_hooks.open_hf_headers = _open_hf_headers
_io_hooks.hub_offline = lambda: bool(import_module("eagleconv.hub").offline())
_io_hooks.recognise_checkpoint = _recognise_checkpoint
_io_hooks.gguf_config = _gguf_config


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eagleconv' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from .conversion import convert, plan_conversion  # noqa: F401
    from .drafter import AuxLayers, DrafterSpec, EagleFlags, MlaDims  # noqa: F401
    from .errors import (ArgumentTypeError, ConversionError, EagleconvError, FindingsError, FormatError,  # noqa: F401
                         UnsafeInputError, UsageError)
    from .formats import LAYOUTS  # noqa: F401
    from .eagle31 import downgrade, upgrade  # noqa: F401
    from .inspection import inspect  # noqa: F401
    from .validation import lint, validate  # noqa: F401
    from .io.reader import open_checkpoint  # noqa: F401
    from .loading import LoadedDrafter, load_drafter  # noqa: F401
    from .forward import Drafter, capture_aux_states, diff, load  # noqa: F401
    from .report import DiffReport, ForwardReport  # noqa: F401
    from .report import ConvertReport, Finding, InspectReport, TransformReport, ValidationReport  # noqa: F401
    from .hub import PullReport, PushReport, pull, push  # noqa: F401
