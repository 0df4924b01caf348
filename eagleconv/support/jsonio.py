"""Strict JSON reading: only JSON that every reader parses the same way is accepted.

Python's ``json`` silently keeps the last of two duplicate keys, while other
parsers keep the first; a file that parses differently in two tools is refused
(EC001).  ``validate`` and ``lint`` pass a ``duplicates`` list instead: the
duplicates are recorded (and become EC001 findings) and the value the engines
read, the last, is kept, so the rest of the file is still judged.

Python's ``json`` is also more lenient than the readers downstream, so these are
refused too, naming the field: text that is not UTF-8 or starts with a byte-order
mark (transformers and safetensors' serde_json refuse it, Python's ``json``
guesses UTF-16), lone UTF-16 surrogates (serde_json refuses them, and Python
cannot even print or encode them), numbers beyond a double (``1e999`` would be
read as ``inf``), transformers' spelling of a non-finite float
(``{"__float__": "NaN"}``, which its config reader decodes) and nesting deeper
than :data:`MAX_DEPTH` (transformers and Python's own recursion give up at a few
hundred; serde_json at 128).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from ..errors import ArgumentTypeError, FormatError, UnsafeInputError

MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64  # a drafter config nests 3 deep; serde_json's limit is 128
# Values in a config built in memory (a drafter config holds ~50): a dict can reference one sub-dict many times,
# which no file can, so 64 levels of two references each would be 2**64 values for a writer to expand.
MAX_CONFIG_VALUES = 1 << 18
_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_FLOAT_TAGS = frozenset({"NaN", "Infinity", "-Infinity"})  # transformers' PretrainedConfig._decode_special_floats

# What JSON text parses into: the type of a config, a report or a server's reply before it is checked field by field.
JSONValue: TypeAlias = "None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]"
JSONObject: TypeAlias = "dict[str, JSONValue]"


class DuplicateKeyError(ValueError):
    def __init__(self, key: str):
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _reject_duplicates(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
    out: JSONObject = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def _recording_duplicates(found: list[str]) -> Callable[[list[tuple[str, JSONValue]]], JSONObject]:
    def hook(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
        out: JSONObject = {}
        for key, value in pairs:
            if key in out:
                found.append(key)
            out[key] = value  # the last value wins, as in Python's json (what the engines use)
        return out

    return hook


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


def json_path(parts: tuple[str | int, ...], limit: int = 8) -> str:
    """``a.b[0]["x.y"]``: where a value sits, printable even when a key holds a surrogate (``limit`` parts)."""
    out = ""
    for part in parts[:limit]:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"  # ensure_ascii: a lone surrogate prints as \udXXX
    return (out + ("..." if len(parts) > limit else "")) or "the top level"


def _decode(data: bytes, source: str | Path) -> str:
    """UTF-8 without a byte-order mark, strictly (Python's json would guess UTF-16/32 and accept a BOM)."""
    encoding = json.detect_encoding(data)
    if encoding != "utf-8":
        name = "UTF-8 with a byte-order mark" if encoding == "utf-8-sig" else encoding.upper()
        raise UnsafeInputError(f"invalid JSON: the text is {name}; JSON files must be UTF-8 without a byte-order mark",
                               source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeInputError(f"invalid JSON: not UTF-8 at byte {exc.start}", source) from exc


def _portable_scalar(item: object) -> bool:
    if type(item) is str:
        return item.isascii() or not _SURROGATE.search(item)
    return type(item) is not float or math.isfinite(item)


def _float_tag(item: Mapping[str, object]) -> str | None:
    tag = item.get("__float__") if len(item) == 1 else None
    return tag if isinstance(tag, str) and tag in _FLOAT_TAGS else None


def _is_portable(value: JSONObject | list[JSONValue]) -> bool:
    """No lone surrogate, no inf, at most MAX_DEPTH deep: the fast check, which builds no paths."""
    stack: list[tuple[int, JSONObject | list[JSONValue]]] = [(0, value)]
    while stack:
        depth, item = stack.pop()
        if depth >= MAX_DEPTH:
            return False
        values = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict) and (not all(_portable_scalar(key) for key in item) or _float_tag(item)):
            return False
        for child in values:
            if type(child) is dict or type(child) is list:
                stack.append((depth + 1, child))
            elif not _portable_scalar(child):
                return False
    return True


def _refuse_unportable(value: JSONValue, source: str | Path) -> None:
    """Refuse what Python's json accepts and other readers do not: lone surrogates, inf, deep nesting."""
    if _is_portable(value) if type(value) is dict or type(value) is list else _portable_scalar(value):
        return  # the common case; the walk below, which names the path, runs only for a refusal
    stack: list[tuple[tuple[str | int, ...], JSONValue]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict | list):
            if len(path) >= MAX_DEPTH:
                raise UnsafeInputError(f"invalid JSON: nested deeper than {MAX_DEPTH} levels at "
                                       f"{json_path(path, limit=4)}", source)
            if isinstance(item, dict) and _float_tag(item):
                raise UnsafeInputError(f"invalid JSON: {json_path(path)} is transformers' spelling of the "
                                       f"non-finite number {_float_tag(item)}", source)
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise UnsafeInputError(f"invalid JSON: key {json_path((*path, key))} holds a lone surrogate; "
                                           "JSON text must be valid Unicode", source)
                stack.append(((*path, key), child))
        elif isinstance(item, str) and _SURROGATE.search(item):
            raise UnsafeInputError(f"invalid JSON: {json_path(path)} holds a lone surrogate "
                                   f"({json.dumps(item)[:40]}); JSON text must be valid Unicode", source)
        elif isinstance(item, float) and not math.isfinite(item):
            raise UnsafeInputError(f"invalid JSON: {json_path(path)} is a number beyond a double's range "
                                   f"(it would be read as {item})", source)


def _depth_path(text: str) -> tuple[str | int, ...]:
    """Where ``text`` first nests deeper than MAX_DEPTH: for text too deep for ``json`` itself to parse."""
    brackets: list[str] = []  # per open container: its bracket,
    keys: list[str | int] = []  # and the current key or index in it
    path: list[str | int] = []
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{},]', text):
        t = token.group()
        if t in "[{":
            if brackets:
                path.append(keys[-1])
            if len(path) >= MAX_DEPTH:
                break
            brackets.append(t)
            keys.append(0 if t == "[" else "")
        elif t in "]}":
            brackets.pop()
            keys.pop()
            if brackets and path:
                path.pop()
        elif t == ",":
            index = keys[-1] if brackets and brackets[-1] == "[" else None
            if isinstance(index, int):
                keys[-1] = index + 1
        elif brackets and brackets[-1] == "{":  # a key (or a value, which the next key replaces)
            try:
                keys[-1] = json.loads(t)
            except ValueError:
                keys[-1] = t
    return tuple(path)


def loads_strict(text: str | bytes, source: str | Path = "<json>", duplicates: list[str] | None = None,
                 parse_int: Callable[[str], object] | None = None) -> Any:
    """Parse JSON text, refusing what other readers would read differently or not at all (see the module doc).

    Duplicate keys are refused (EC001) or recorded into ``duplicates``.  ``parse_int`` is
    ``json``'s hook, for a caller with a stricter reader downstream (safetensors' headers).
    """
    hook = _reject_duplicates if duplicates is None else _recording_duplicates(duplicates)
    if isinstance(text, bytes | bytearray):
        text = _decode(bytes(text), source)
    try:
        value = json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant, parse_int=parse_int)
    except DuplicateKeyError as exc:
        raise UnsafeInputError(f"JSON has a {exc}", source, code="EC001") from exc
    except RecursionError as exc:
        raise UnsafeInputError(f"invalid JSON: nested deeper than {MAX_DEPTH} levels at "
                               f"{json_path(_depth_path(text), limit=4)}", source) from exc
    except ValueError as exc:
        raise UnsafeInputError(f"invalid JSON: {exc}", source) from exc
    _refuse_unportable(value, source)
    return value


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


def config_dict(config: object, *, argument: str = "config", duplicates: list[str] | None = None) -> dict[str, Any]:
    """A config argument as a dict, whichever form the caller holds: a mapping, a config.json path (or its
    directory), or a config object with ``to_dict()`` (a transformers ``PretrainedConfig``, as training code
    has it).  Another type is an ArgumentTypeError naming ``argument``; a file that is not a JSON object is a
    FormatError naming the file.  ``duplicates``: see :func:`loads_strict` (files only)."""
    from .bounds import check_config  # sizes bounded before anything is built from them

    if isinstance(config, Mapping):
        checked = _checked_like_a_file(config, argument)
        check_config(checked, argument)
        return checked
    if isinstance(config, str | os.PathLike):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        value = load_json(path, duplicates=duplicates)
        if not isinstance(value, dict):
            raise FormatError("config is not a JSON object", path)
        check_config(value, path)
        return value
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
        if isinstance(value, Mapping):
            checked = _checked_like_a_file(value, argument)
            check_config(checked, argument)
            return checked
        raise ArgumentTypeError(f"{argument}: {type(config).__name__}.to_dict() returned {type(value).__name__}, "
                                "not a dict")
    raise ArgumentTypeError(f"{argument} must be a dict, a config.json path or a config object with to_dict() (a "
                            f"transformers PretrainedConfig), not {type(config).__name__}")


_JSON_SCALARS = (str, int, float, bool, type(None))


def _checked_like_a_file(config: Mapping[str, object], argument: str) -> dict[str, Any]:
    """A config the caller built in memory, held to what its config.json would be, and read as that file:
    only JSON values (a torch.dtype, a set or bytes is an ArgumentTypeError naming the field), no cycle and at
    most MAX_DEPTH levels and MAX_CONFIG_VALUES values (a shared sub-dict counts each time it is referenced), at
    most MAX_JSON_BYTES once written, then :func:`loads_strict`'s checks (no lone surrogate, no inf or NaN), each
    refusal one line naming the argument and the field."""
    budget = MAX_CONFIG_VALUES
    stack: list[tuple[tuple[str | int, ...], object]] = [((), config)]
    while stack:
        path, item = stack.pop()
        budget -= 1
        if budget < 0:
            raise UnsafeInputError(f"holds more than {MAX_CONFIG_VALUES} values", argument)
        if isinstance(item, Mapping | list | tuple):
            if len(path) >= MAX_DEPTH:  # a cyclic dict ends here too, instead of in a RecursionError
                raise UnsafeInputError(f"nested deeper than {MAX_DEPTH} levels (or cyclic) at "
                                       f"{json_path(path, limit=4)}", argument)
            bad = next((k for k in item if not isinstance(k, _JSON_SCALARS)), None) if isinstance(item, Mapping) else None
            if bad is not None:  # an int key is written as a string, as transformers' id2label is
                raise ArgumentTypeError(f"{argument}: {json_path(path)} has the key {bad!r:.40} of type "
                                        f"{type(bad).__name__}; JSON keys are strings")
            children = ((str(k), v) for k, v in item.items()) if isinstance(item, Mapping) else enumerate(item)
            stack.extend(((*path, key), child) for key, child in children)
        elif not isinstance(item, _JSON_SCALARS):
            hint = f' (config.json says "{str(item).rpartition(".")[2]}")' if type(item).__module__ == "torch" else ""
            raise ArgumentTypeError(f"{argument}: {json_path(path)} is a {type(item).__name__} ({item!r:.40}), "
                                    f"which a config.json cannot hold{hint}")
    text = json.dumps(_plain(config))
    if len(text) > MAX_JSON_BYTES:
        raise UnsafeInputError(f"larger than a config.json of {MAX_JSON_BYTES} bytes", argument)
    value: dict[str, Any] = loads_strict(text, argument)
    return value


def _plain(item: object) -> object:
    """Dicts and lists for any Mapping and sequence (depth already bounded by the caller)."""
    if isinstance(item, Mapping):
        return {key: _plain(child) for key, child in item.items()}
    if isinstance(item, list | tuple):
        return [_plain(child) for child in item]
    return item


def dump_json(obj: object) -> str:
    """The one JSON style eagleconv writes: indented, keys in insertion order."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
