"""Optional dependencies: which extra installs each one, and the one-line error when it is missing.

``pip install eagleconv`` holds what convert, inspect, validate, lint, push and pull use.  The forward
passes, simulate, upgrade/downgrade, ``--allow-pickle`` and ``eagleconv.synthetic`` need torch (and a
target run by transformers needs transformers): each calls :func:`need` before it imports them, so a
missing one is a typed error naming the extra (exit 2), not a ModuleNotFoundError traceback.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from .errors import MissingExtraError

# module -> the extra (pyproject.toml [project.optional-dependencies]) that installs it
EXTRA_OF = {"torch": "forward", "transformers": "forward", "triton": "kernels"}


def need(module: str, feature: str, path: str | Path | None = None) -> None:
    """Import ``module`` or raise MissingExtraError: "FEATURE needs MODULE: pip install 'eagleconv[EXTRA]'"."""
    if sys.modules.get(module) is not None:  # already imported
        return
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # installed, but something it imports is missing: a broken install, not an extra
            raise
        extra = EXTRA_OF[module]
        raise MissingExtraError(f"{feature} needs {module}, which is not installed: pip install 'eagleconv[{extra}]'",
                                module, extra, path) from None
