"""Every file a docstring or a package document cites exists in the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_docstrings_cite_only_files_in_the_repository():
    cited = re.compile(r"[\w./-]+\.md\b")
    missing = []
    for path in (REPO / "eagleconv").rglob("*"):
        if path.suffix not in (".py", ".md") or "__pycache__" in path.parts:
            continue
        for ref in cited.findall(path.read_text()):
            if not ((path.parent / ref).exists() or (REPO / ref).exists()):
                missing.append(f"{path.relative_to(REPO)} cites {ref}")
    assert not missing, missing
