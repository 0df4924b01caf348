"""Text that is safe to print on one line and to encode as UTF-8, whatever a path or a file held.

A path that is not UTF-8 reaches Python as lone surrogates (``os.fsdecode``'s surrogateescape: byte 0xff is
U+DCFF), which no UTF-8 stream or JSON encoder accepts; a path may also hold a newline or an escape sequence.
Messages and reports show such characters backslash-escaped, as Python's ``repr`` does: ``out\\xff``, ``a\\nb``.
"""

from __future__ import annotations


def _escaped(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape carried: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return repr(char)[1:-1]  # \n, \t, \x1b, \u2028, \ud800


def printable(text: str, controls: bool = True) -> str:
    """``text`` with lone surrogates (and, with ``controls``, control and other unprintable characters) escaped."""
    if text.isprintable() and not _has_surrogate(text):
        return text
    return "".join(_escaped(c) if (_is_surrogate(c) or (controls and not c.isprintable())) else c for c in text)


def shown(text: str) -> str:
    """``text`` from outside (a server's version, a report's note) for a rich console line: control characters
    escaped (no escape sequence, newline or bell reaches the terminal), and rich's markup brackets too."""
    from rich.markup import escape

    return escape(printable(text))


# Markdown's and HTML's active characters: escaped, a field cannot open a heading, a link, a table cell or a tag.
_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*_{}[]()#+-.!|~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"})


def markdown_text(text: str) -> str:
    """``text`` from outside (a server, a report) as inert markdown on one line: control characters (newlines
    included) escaped as :func:`printable` shows them, then every markdown and HTML active character."""
    return printable(text).translate(_MARKDOWN)


def _is_surrogate(char: str) -> bool:
    return 0xD800 <= ord(char) <= 0xDFFF


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def without_surrogates(value: object) -> object:
    """A JSON-ready value (dicts, lists, strings...) with every string's lone surrogates escaped."""
    if isinstance(value, str):
        return printable(value, controls=False)
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_surrogates(v) for v in value]
    return value


def human_bytes(n: int) -> str:
    """A byte count as people read it: 512 B, 1.5 KiB ... GiB (the CLI's sizes and progress)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
