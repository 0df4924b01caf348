"""The command blocks of README.md and docs/*.md, read as tests/docs/test_command_blocks.py runs them.

The conventions a page follows so that its examples run (docs/README.md states them for writers):

- A ```bash, ```sh, ```shell or ```console block, and a ```python block, is an example that must run.  Any
  other fence (```text, ```yaml, a bare ```) is output or a file's content and is not run.
- An HTML comment on the line before the fence, ``<!-- needs: NAME[, NAME...] -->``, names what the block needs
  beyond the suite: ``vllm``, ``llama.cpp``, ``smollm2`` (the real pair, as ``$PAIR``), ``hub`` (the loopback
  Hub), ``server`` (starts or asks a long-running server), ``gpu``, ``ci`` (the block is one of ``.ci/run``'s own steps).
  A block with no marker must run everywhere the suite runs.
- Blocks run in a fresh directory holding ``fixtures/`` (and ``benchmarks/``, ``.ci/``, ``tests/``) of the
  repository; ``/tmp/`` in a block means a ``tmp/`` folder there.  The blocks of one page share that directory
  and run in page order, so one block's output can be the next one's input.
- A shell command that must fail says so in its comment, ``# exits N``: the test holds it to that exit status.
- ``pip install ...`` in a shell block is what the suite's environment has already done: it is not re-run.
- A ```console block's ``$ `` lines are the commands (``\\`` continues one); each must exit 0 unless it says
  ``# exits N``, or the output shown under it begins with ``eagleconv: error`` and then it must exit non-zero.  Every output line shown
  without ``...`` in it must be among the lines the command printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = {"bash", "sh", "shell", "console", "python"}
NEEDS = {"vllm", "llama.cpp", "smollm2", "hub", "server", "gpu", "ci"}

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_NEEDS = re.compile(r"^\s*<!--\s*needs:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    page: Path
    heading: str
    lang: str
    text: str
    line: int
    needs: list[str] = field(default_factory=list)
    nth: int = 1  # the block's number under its heading

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-") or "top"
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page.name
        return f"{page}:{slug}:{self.nth}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` in a language that runs, with its heading and ``needs`` marker."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    heading = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        fence = _FENCE.match(line)
        if not fence:
            i += 1
            continue
        indent, lang = fence.group(1), fence.group(2)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        if lang in RUN:
            prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            marker = _NEEDS.match(prev)
            needs = [n.strip() for n in marker.group(1).split(",")] if marker else []
            unknown = set(needs) - NEEDS
            if unknown:
                raise ValueError(f"{page}:{i + 1}: unknown needs {sorted(unknown)} (known: {sorted(NEEDS)})")
            nth = 1 + sum(b.heading == heading for b in found)
            found.append(Block(page, heading, lang, "\n".join(body) + "\n", i + 1, needs, nth))
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """A console block's commands, each with the output lines shown under it."""
    commands: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            commands.append((command, []))
        elif commands:
            commands[-1][1].append(lines[i])
        i += 1
    return commands


def without_pip_install(script: str) -> str:
    """``pip install ...`` (up to ``&&``, ``;`` or the line's end) becomes ``true``: the suite's environment has it."""
    return re.sub(r"\bpip install [^;&\n]*", "true ", script)


EXITS = re.compile(r"^(?P<cmd>[^#].*?)\s+#\s*exits (?P<code>\d+)\b.*$")


def expecting_exits(script: str) -> str:
    """Each command commented ``# exits N`` must end with status N (and the script goes on); others run under -e."""
    joined: list[str] = []
    for line in script.splitlines():
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line)
    out = []
    for n, line in enumerate(joined, 1):
        match = EXITS.match(line)
        if match:
            code = match.group("code")
            line = (f"if {match.group('cmd')}; then rc=0; else rc=$?; fi; [ \"$rc\" -eq {code} ] || "
                    f"{{ echo \"command {n} exited $rc; the page says {code}\" >&2; exit 1; }}")
        out.append(line)
    return "\n".join(out) + "\n"
