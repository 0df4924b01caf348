"""What every Hub read shares: its errors, the manifest's names, the timeouts' defaults, and the endpoint, cache and
offline mode as the environment says now."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..errors import EagleconvError
from ..spec.report import _Report

MANIFEST = "MANIFEST.json"
CARD = "README.md"
MANIFEST_FORMAT = "eagleconv-manifest/1"
# Files a Hub repository may carry beside the manifest: the Hub creates .gitattributes, and
# model cards are edited on the Hub after publication.
LENIENT = {".gitattributes", CARD}
HASH_CHUNK = 1024 * 1024
# Every Hub request gives up after this long without an answer (connect: at most CONNECT_TIMEOUT), instead of
# huggingface_hub's none-or-retried-five-times; --timeout or EAGLECONV_HUB_TIMEOUT sets it.
DEFAULT_TIMEOUT = 60.0
CONNECT_TIMEOUT = 10.0
TIMEOUT_ENV = "EAGLECONV_HUB_TIMEOUT"

# step(what, done, total), in bytes: one call per advance of each named step (hub.STEPS); the CLI draws the bars
Step = Callable[[str, int, int], None]
DOWNLOADING = "downloading"  # the step a snapshot download reports (pull's first)


class HubError(EagleconvError):
    """The Hub could not be reached, refused a request, or holds something other than the manifest (exit 2)."""


class HubTimeoutError(HubError):
    """A Hub request got no answer within the timeout (raised from the HTTP client, so it is never retried)."""


class ManifestEntry(_Report):
    path: str
    size: int
    sha256: str


def hub_endpoint(explicit: str | None) -> str | None:
    """The endpoint to use: explicit, else HF_ENDPOINT read now (huggingface_hub reads it only at import)."""
    return explicit or os.environ.get("HF_ENDPOINT") or None


def hub_cache_dir() -> str | None:
    """HF_HUB_CACHE (else HF_HOME/hub) as the environment says now; None: huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME")
    return str(Path(home) / "hub") if home else None


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE), as huggingface_hub read it at import or as the environment says now."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    hub_offline = getattr(constants, "is_offline_mode", lambda: constants.HF_HUB_OFFLINE)()  # before 1.0: a constant
    return hub_offline or (env or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_error(exc: BaseException, doing: str, where: str | None = None) -> HubError:
    if isinstance(exc, HubError):
        return type(exc)(f"{doing}: {exc.message}", where or exc.path)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HubError(f"{doing}: {type(exc).__name__}: {text}", where)
