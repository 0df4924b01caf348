"""What --overwrite may replace: a drafter checkpoint, or eagleconv's own output, and nothing else.

Split from ``io/staging.py`` (issue 26).  --overwrite replaces only a
directory whose content eagleconv recognises as a drafter checkpoint (or its
own output, which names its layout in config.json): a drafter config, and
weights whose safetensors headers (or index) parse or that are torch files;
nothing but files with the names trainers and the Hub use.  An empty directory
is fine too.  Anything else is refused before any byte is written.  Whether
the content is a drafter is the layouts' question: the caller that allows
--overwrite passes the answer in (``recognise``: readers.loading's
``recognise_checkpoint``), so io never imports the layouts.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError

# (directory, its entry names, the directory as the user wrote it) -> None, or UsageError (not_a_checkpoint) unless
# the content is a drafter checkpoint: what a caller that allows --overwrite passes in.
Recognise = Callable[[Path, list[str], str | Path], None]

_CHECKPOINT_FILE = re.compile(
    r"^(?:config\.json|generation_config\.json|MANIFEST\.json|README\.md|\.gitattributes"
    r"|[^/]*\.safetensors|[^/]*\.safetensors\.index\.json|[^/]*\.(?:bin|pt|pth)|[^/]*\.bin\.index\.json"
    r"|tokenizer(?:_config)?\.json|tokenizer\.model|special_tokens_map\.json|added_tokens\.json|vocab\.json"
    r"|merges\.txt|chat_template\.jinja)$")
_CORE_FILE = re.compile(r"^(?:config\.json|[^/]*\.safetensors|[^/]*\.(?:bin|pt|pth))$")


def check_replaceable(destination: Path, recognise: Recognise, shown: str | Path | None = None) -> None:
    """Raise UsageError (exit 2) unless --overwrite may replace ``destination``; nothing is touched.

    ``recognise``: whether a directory of checkpoint file names holds a drafter checkpoint by content.
    ``shown``: the destination as the user spelled it, for the message.
    """
    shown = destination if shown is None else shown
    if destination.is_symlink():
        raise UsageError("destination is a symbolic link; --overwrite replaces only a real checkpoint directory, "
                         "nothing was deleted", shown)
    if not destination.is_dir():
        raise UsageError("destination exists and is not a directory; nothing was deleted", shown)
    entries = sorted(os.scandir(destination), key=lambda e: e.name)
    foreign = [e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries
               if not (_CHECKPOINT_FILE.match(e.name) and stat.S_ISREG(e.stat().st_mode))]
    if foreign:
        shown_names = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise not_a_checkpoint(f"it holds {shown_names}", shown)
    if entries:
        recognise(destination, [e.name for e in entries], shown)


def not_a_checkpoint(why: str, shown: str | Path) -> UsageError:
    return UsageError(f"destination is not a checkpoint directory ({why}); --overwrite replaces only a drafter "
                      "checkpoint or an eagleconv output, nothing was deleted", shown)
