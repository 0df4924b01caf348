"""The target model a drafter drafts for (speculators calls it the verifier), read from its config.json.

transformers' config classes read it (no weights, no network), imported here
lazily, so nothing else pays for it.  Only the three numbers validation and the
forward need are kept: hidden size, vocabulary and layer count (multimodal
targets: the text model's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import FormatError, UnsafeInputError
from .jsonio import load_json


@dataclass(frozen=True)
class TargetInfo:
    path: str
    model_type: str | None
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int


def _from_transformers(directory: Path, raw: dict[str, Any]) -> Any:
    """The text config transformers builds for this target, or None when it does not know the model_type."""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - unknown model_type or a config transformers refuses: use the raw numbers
        return None
    get_text = getattr(config, "get_text_config", None)
    return get_text() if callable(get_text) else config


def load_target(path: str | Path) -> TargetInfo:
    """Read a target model's config (a directory holding config.json, or the file itself)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise UnsafeInputError("no target config.json here", path)
    raw = load_json(file)  # strict: duplicate keys are refused before transformers sees the file
    if not isinstance(raw, dict):
        raise FormatError("target config is not a JSON object", file)
    config = _from_transformers(file.parent, raw) if file.name == "config.json" else None
    text_config = raw.get("text_config")
    text: dict[str, Any] = text_config if isinstance(text_config, dict) else raw

    def number(key: str) -> int:
        value = getattr(config, key, None) if config is not None else None
        value = text.get(key) if value is None else value
        if not isinstance(value, int) or isinstance(value, bool):
            raise FormatError(f"target config has no integer {key}", file)
        return value

    return TargetInfo(str(path), raw.get("model_type"), number("hidden_size"), number("vocab_size"),
                      number("num_hidden_layers"))
