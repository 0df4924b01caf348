"""eagleconv: convert and validate EAGLE-3 / EAGLE-3.1 speculative-decoding drafter checkpoints.

The public API is re-exported here lazily, so ``import eagleconv`` (and the
CLI's ``--help``) stays fast and never imports torch.
"""

# No ``from __future__ import annotations`` and private aliases only: this module's namespace is the public API
# (tests/test_public_api.py), so nothing it merely uses may show up in it.
from importlib import import_module as _import_module
from typing import TYPE_CHECKING
from typing import Any as _Any

from ._version import __version__

# The public API, stated once: name -> the module that defines it.  ``__all__`` is derived from it, the
# TYPE_CHECKING block below spells the same imports for type checkers, and tests/test_public_api.py holds the
# three (and docs/library.md's list) equal.
_EXPORTS = {
    # reading, converting, validating
    "inspect": "eagleconv.readers.inspection",
    "convert": "eagleconv.conversion",
    "plan_conversion": "eagleconv.conversion.plan",
    "validate": "eagleconv.validation",
    "lint": "eagleconv.validation",
    "open_checkpoint": "eagleconv.readers.loading",
    "load_drafter": "eagleconv.readers.loading",
    "LAYOUTS": "eagleconv.formats",
    # EAGLE-3 <-> 3.1
    "upgrade": "eagleconv.eagle31.api",
    "downgrade": "eagleconv.eagle31.api",
    # the forward (the [forward] extra)
    "load": "eagleconv.forward",
    "diff": "eagleconv.forward",
    "capture_aux_states": "eagleconv.forward",
    "Drafter": "eagleconv.forward",
    # acceptance: simulated offline (the [forward] extra), measured on a server
    "simulate": "eagleconv.simulation",
    "measure": "eagleconv.measurement",
    # the Hub
    "push": "eagleconv.hub",
    "pull": "eagleconv.hub",
    # the canonical description
    "DrafterSpec": "eagleconv.spec.drafter",
    "AuxLayers": "eagleconv.spec.drafter",
    "EagleFlags": "eagleconv.spec.drafter",
    "MlaDims": "eagleconv.spec.drafter",
    "LoadedDrafter": "eagleconv.readers.loading",
    # reports
    "Finding": "eagleconv.spec.report",
    "InspectReport": "eagleconv.spec.report",
    "ConvertReport": "eagleconv.spec.report",
    "ValidationReport": "eagleconv.spec.report",
    "TransformReport": "eagleconv.spec.report",
    "DiffReport": "eagleconv.spec.report",
    "ForwardReport": "eagleconv.spec.report",
    "SimulateReport": "eagleconv.simulation",
    "MeasureReport": "eagleconv.measurement",
    "PushReport": "eagleconv.hub",
    "PullReport": "eagleconv.hub",
    # errors (each also subclasses the builtin it means where there is one)
    "EagleconvError": "eagleconv.errors",
    "ConversionError": "eagleconv.errors",
    "FormatError": "eagleconv.errors",
    "FindingsError": "eagleconv.errors",
    "UnsafeInputError": "eagleconv.errors",
    "UsageError": "eagleconv.errors",
    "ArgumentTypeError": "eagleconv.errors",
    "SimulateError": "eagleconv.simulation",
    "MeasureError": "eagleconv.measurement",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eagleconv' has no attribute {name!r}")
    value = getattr(_import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from .conversion import convert
    from .conversion.plan import plan_conversion
    from .spec.drafter import AuxLayers, DrafterSpec, EagleFlags, MlaDims
    from .eagle31.api import downgrade, upgrade
    from .errors import (ArgumentTypeError, ConversionError, EagleconvError, FindingsError, FormatError,
                         UnsafeInputError, UsageError)
    from .formats import LAYOUTS
    from .forward import Drafter, capture_aux_states, diff, load
    from .hub import PullReport, PushReport, pull, push
    from .readers.inspection import inspect
    from .readers.loading import LoadedDrafter, load_drafter, open_checkpoint
    from .measurement import MeasureError, MeasureReport, measure
    from .spec.report import (ConvertReport, DiffReport, Finding, ForwardReport, InspectReport, TransformReport,
                              ValidationReport)
    from .simulation import SimulateError, SimulateReport, simulate
    from .validation import lint, validate
