"""``eagleconv audit``'s table: one row per repository, one column per engine, then the counts."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from .._text import human_bytes, printable
from ..hub import AuditSummary
from .render import table

VERDICT_STYLE = {"runs as intended": "green", "loads": "yellow", "runs differently": "red", "fails": "bold red"}


def render_audit(summary: AuditSummary, console: Console) -> None:
    engines = list(summary.verdicts)
    rows = table("repository", "state", "layout", "EAGLE", "architecture", "aux ids", *engines, "first error",
                 "commit", "read", title="audit")
    for r in summary.rows:
        verdicts = {v.engine: v for v in r.engines}
        cells = [f"[{VERDICT_STYLE[verdicts[e].verdict]}]{verdicts[e].verdict}[/]" if e in verdicts else "-"
                 for e in engines]
        version = (r.eagle_version or "-") + (f" ({', '.join(r.eagle31_flags)})" if r.eagle31_flags else "")
        aux = f"{r.aux_layer_ids} ({r.aux_layer_convention})" if r.aux_layer_ids is not None else "-"
        why = r.first_error or r.error or ""
        why = why if len(why) <= 100 else why[:99] + "…"
        rows.add_row(escape(printable(r.repo_id + (f"@{r.revision}" if r.revision else ""))), r.state,
                     r.layout or "-", version, r.architecture or "-", aux, *cells, escape(printable(why)),
                     (r.commit or "-")[:10], human_bytes(r.bytes_transferred))
    console.print(rows)
    states = ", ".join(f"{n} {s}" for s, n in summary.states.items())
    console.print(f"{summary.repositories} repositories ({states}); {summary.with_errors} with error findings; "
                  f"{human_bytes(summary.bytes_transferred)} read in {summary.seconds:.1f} s"
                  + (f"; {summary.skipped} already in {escape(summary.rows_file or '')}" if summary.skipped else ""))
    if not summary.ok:
        console.print(f"[bold red]--fail-on {summary.fail_on}: failed[/]")
