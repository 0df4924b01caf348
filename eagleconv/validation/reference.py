"""The findings reference (FINDINGS.md beside this file), generated from the code table and the engine profiles.

``render_findings()`` is the single source; ``eagleconv findings`` prints it
and a test fails when the shipped file differs from it.
"""

from __future__ import annotations

from pathlib import Path

from .codes import CODES

REFERENCE_PATH = Path(__file__).with_name("FINDINGS.md")

# Codes the engine-independent checks (structural, vocab, target, numeric, trainer semantics) emit.
ENGINE_INDEPENDENT = {"EC001", "EC002", "EC003", "EC004", "EC005", "EC020", "EC021", "EC023", "EC030", "EC050",
                      "EC052", "EC053", "EC060", "EC061", "EC062"}

# Codes only the pre-upload checks of `eagleconv push` emit.
PUBLISH = {"EC080"}


def engines_by_code() -> dict[str, list[str]]:
    from ..engines import PROFILES

    out: dict[str, list[str]] = {code: [] for code in CODES}
    for profile in PROFILES.values():
        for check in profile.checks:
            for code in getattr(check, "codes", ()):
                if profile.label not in out[code]:
                    out[code].append(profile.label)
    return out


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
    for code in CODES.values():
        where = []
        if code.code in ENGINE_INDEPENDENT:
            where.append("engine-independent")
        if code.code in PUBLISH:
            where.append("eagleconv push (pre-upload)")
        where += engines[code.code]
        lines += [f"## {code.code}: {code.title}", "", code.explanation, "",
                  f"- severity: {code.severity}", f"- checked for: {', '.join(where) or 'none yet'}", ""]
    lines += ["# Engine profiles", ""]
    for profile in PROFILES.values():
        lines += [f"## {profile.label}", "", profile.summary, ""]
        lines += [f"- {note}" for note in profile.history]
        lines += [""] if profile.history else []
    return "\n".join(lines).rstrip() + "\n"
