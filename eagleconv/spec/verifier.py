"""The target model a converted drafter names, from ``--verifier NAME_OR_PATH``.

eagleconv calls it the target everywhere; "verifier" is speculators' word (``speculators_config.verifier``),
kept in the option and in ``drafter.Verifier``, which describe that field.

speculators' ``SpeculatorModel.from_pretrained`` reads
``speculators_config.verifier.name_or_path`` and calls
``AutoConfig.from_pretrained`` on it, so a speculators output without one
cannot be loaded there.  A local directory is read for its ``architectures``;
anything else is taken as a Hub id (nothing is fetched).
"""

from __future__ import annotations

from pathlib import Path

from .drafter import Verifier
from ..errors import FormatError, UsageError
from ..support.jsonio import load_json


def _looks_like_a_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~")) or text in (".", "..") or Path(text).exists()


def resolve_verifier(name_or_path: str) -> Verifier:
    """``name_or_path`` as a :class:`Verifier`: a local model directory (recorded as an absolute path, architectures
    read from its config.json) or a Hub id (architectures unknown).  A path that is not a model directory is a usage error."""
    text = name_or_path.strip()
    if not text:
        raise UsageError("--verifier is empty")
    if not _looks_like_a_path(text):
        return Verifier(name_or_path=text)
    directory = Path(text).expanduser()
    config_file = directory / "config.json"
    if not directory.is_dir() or not config_file.is_file():
        raise UsageError("--verifier names a local path that is not a model directory with a config.json", directory)
    config = load_json(config_file)
    if not isinstance(config, dict):
        raise FormatError("verifier config is not a JSON object", config_file)
    archs = config.get("architectures")
    names = tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else ()
    # Absolute, so the name resolves wherever the drafter is loaded from (a Hub id is what to publish).
    return Verifier(name_or_path=str(directory.resolve()), architectures=names)
