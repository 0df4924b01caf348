"""What io needs from the layers above it, handed down instead of imported, so io never imports them.

``eagleconv/__init__.py`` (the package's one composition root, run before any
submodule) sets each to a function that imports its module on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# hf://ORG/NAME[@REV] -> the verified snapshot directory (eagleconv.hub.fetch_verified).
fetch_hf: Callable[[str], Path] | None = None


# hf://ORG/NAME[@REV] read from its config, index and safetensors headers (eagleconv.hub.open_hf_headers):
# (path, duplicates, config_only=...) -> (io.remote.RemoteCheckpoint, a function returning report.HubSource).
open_hf_headers: Callable[..., tuple[Any, Callable[[], Any]]] | None = None
# Whether huggingface_hub is offline (eagleconv.hub.offline): then hf:// is read from the cache, not by range requests.
hub_offline: Callable[[], bool] | None = None
