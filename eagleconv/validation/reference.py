"""The findings reference (FINDINGS.md beside this file), generated from the code table and the engine profiles.

``render_findings()`` is the single source; ``eagleconv findings`` prints it
and a test fails when the shipped file differs from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .codes import CODES

REFERENCE_PATH = Path(__file__).with_name("FINDINGS.md")

# Codes the engine-independent checks (structural, vocab, target, numeric, trainer semantics) emit.
ENGINE_INDEPENDENT = {"EC001", "EC002", "EC003", "EC004", "EC005", "EC006", "EC020", "EC021", "EC023", "EC030",
                      "EC050", "EC052", "EC053", "EC060", "EC061", "EC062"}

# Codes only the pre-upload checks of `eagleconv push` emit.
PUBLISH = {"EC080"}


def engines_by_code() -> dict[str, list[str]]:
    from ..engines import PROFILES

    out: dict[str, list[str]] = {code: [] for code in CODES}
    for profile in PROFILES.values():
        for check in (*profile.checks, *profile.gguf_checks):
            for code in getattr(check, "codes", ()):
                if profile.label not in out[code]:
                    out[code].append(profile.label)
    return out


def checked_for(code: str, engines: dict[str, list[str]]) -> list[str]:
    """Where ``code`` is checked: engine-independent, push, and the engine profiles that emit it."""
    where = ["engine-independent"] if code in ENGINE_INDEPENDENT else []
    if code in PUBLISH:
        where.append("eagleconv push (pre-upload)")
    return where + engines[code]


def code_entry(code: str, engines: dict[str, list[str]]) -> list[str]:
    """One code's section of the reference, as lines."""
    c = CODES[code]
    return [f"## {c.code}: {c.title}", "", c.explanation, "",
            f"- severity: {c.severity}", f"- checked for: {', '.join(checked_for(code, engines)) or 'none yet'}", ""]


def select_codes(codes: Iterable[str]) -> list[str]:
    """``codes`` normalised (ec012 -> EC012), in the order given; UsageError names the unknown ones."""
    from ..errors import UsageError

    wanted = list(dict.fromkeys(c.strip().upper() for c in codes if c.strip()))
    unknown = [c for c in wanted if c not in CODES]
    if unknown:
        raise UsageError(f"unknown finding code(s) {', '.join(unknown)}; known: {', '.join(CODES)}")
    return wanted


def render_codes(codes: Iterable[str]) -> str:
    """The reference entries of ``codes`` only (``eagleconv findings EC012 EC043``)."""
    engines = engines_by_code()
    return "\n".join(line for code in select_codes(codes) for line in code_entry(code, engines)).rstrip() + "\n"


def render_findings() -> str:
    from ..engines import PROFILES

    engines = engines_by_code()
    lines = [
        "# eagleconv findings reference",
        "",
        "Generated from `eagleconv/validation/codes.py` and the engine profiles in `eagleconv/engines/`",
        "(`eagleconv findings` prints it). Codes are stable: they are never renumbered, only added.",
        "",
        "Severity policy: **error** = the engine fails to load the drafter, or provably computes something other",
        "than what the checkpoint states; **warning** = it may (the outcome depends on facts the checkpoint does not",
        "record, such as the runner or the training date); **info** = an observation. `eagleconv validate` and",
        "`lint` exit 1 when any finding is an error. EC001 and EC002 are reported as findings (exit 1), not as",
        "unreadable input (exit 2).",
        "",
    ]
    for code in CODES:
        lines += code_entry(code, engines)
    lines += ["# Engine profiles", ""]
    for profile in PROFILES.values():
        lines += [f"## {profile.label}", "", profile.summary, ""]
        lines += [f"- {note}" for note in profile.history]
        lines += [""] if profile.history else []
    return "\n".join(lines).rstrip() + "\n"
