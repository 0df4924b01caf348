"""Strict JSON reading: duplicate keys are an error (EC001), sizes are capped.

Python's ``json`` silently keeps the last of two duplicate keys, while other
parsers keep the first; a file that parses differently in two tools is refused.
``validate`` and ``lint`` pass a ``duplicates`` list instead: the duplicates are
recorded (and become EC001 findings) and the value the engines read, the last,
is kept, so the rest of the file is still judged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .errors import ArgumentTypeError, FormatError, UnsafeInputError

MAX_JSON_BYTES = 16 * 1024 * 1024


class DuplicateKeyError(ValueError):
    def __init__(self, key: str):
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def _recording_duplicates(found: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                found.append(key)
            out[key] = value  # the last value wins, as in Python's json (what the engines use)
        return out

    return hook


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


def loads_strict(text: str | bytes, source: str | Path = "<json>", duplicates: list[str] | None = None) -> Any:
    """Parse JSON text, refusing NaN/Infinity literals and duplicate keys (or recording them into ``duplicates``)."""
    hook = _reject_duplicates if duplicates is None else _recording_duplicates(duplicates)
    try:
        return json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant)
    except DuplicateKeyError as exc:
        raise UnsafeInputError(f"JSON has a {exc}", source, code="EC001") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnsafeInputError(f"invalid JSON: {exc}", source) from exc
    except RecursionError as exc:
        raise UnsafeInputError("JSON is nested too deeply", source) from exc


def load_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES, duplicates: list[str] | None = None) -> Any:
    """Read and strictly parse a JSON file of at most ``max_bytes`` (``duplicates``: see loads_strict)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise UnsafeInputError(f"cannot read: {exc.strerror or exc}", path) from exc
    if len(data) > max_bytes:
        raise UnsafeInputError(f"JSON file is larger than {max_bytes} bytes", path)
    return loads_strict(data, path, duplicates)


def config_dict(config: Any, *, argument: str = "config", duplicates: list[str] | None = None) -> dict[str, Any]:
    """A config argument as a dict, whichever form the caller holds: a mapping, a config.json path (or its
    directory), or a config object with ``to_dict()`` (a transformers ``PretrainedConfig``, as training code
    has it).  Another type is an ArgumentTypeError naming ``argument``; a file that is not a JSON object is a
    FormatError naming the file.  ``duplicates``: see :func:`loads_strict` (files only)."""
    if isinstance(config, Mapping):
        return dict(config)
    if isinstance(config, str | os.PathLike):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        value = load_json(path, duplicates=duplicates)
        if not isinstance(value, dict):
            raise FormatError("config is not a JSON object", path)
        return value
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
        if isinstance(value, Mapping):
            return dict(value)
        raise ArgumentTypeError(f"{argument}: {type(config).__name__}.to_dict() returned {type(value).__name__}, "
                                "not a dict")
    raise ArgumentTypeError(f"{argument} must be a dict, a config.json path or a config object with to_dict() (a "
                            f"transformers PretrainedConfig), not {type(config).__name__}")


def dump_json(obj: Any) -> str:
    """The one JSON style eagleconv writes: indented, keys in insertion order."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
