"""Optional dependencies: which extra installs each one, and the one-line error when it is missing.

``pip install eagleconv`` holds what convert, inspect, validate, lint, push and pull use.  The forward
passes, simulate, upgrade/downgrade, ``--allow-pickle`` and ``eagleconv.synthetic`` need torch (and a
target run by transformers needs transformers): each calls :func:`need` before it imports them, so a
missing one is a typed error naming the extra (exit 2), not a ModuleNotFoundError traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ..errors import MissingExtraError

# module -> the extra (pyproject.toml [project.optional-dependencies]) that installs it
EXTRA_OF = {"torch": "forward", "transformers": "forward", "triton": "kernels"}


def need(module: str, feature: str, path: str | Path | None = None) -> None:
    """Raise MissingExtraError ("FEATURE needs MODULE: pip install 'eagleconv[EXTRA]'") unless ``module`` is installed.

    Finds it without importing it: callers import it when they are ready (upgrade first blocks the termination
    signals, so that the threads torch and numpy start at import cannot take them; _process.start_worker_pools).
    """
    if sys.modules.get(module) is not None:  # already imported
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError as exc:  # a meta-path finder that refuses it
        if exc.name != module:
            raise
        found = False
    if not found:
        extra = EXTRA_OF[module]
        raise MissingExtraError(f"{feature} needs {module}, which is not installed: pip install 'eagleconv[{extra}]'",
                                module, extra, path) from None
