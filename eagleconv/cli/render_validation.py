"""Human rendering of a ValidationReport with rich."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._text import printable
from ..spec.report import ValidationReport
from .render import hub_line
from .render import table as make_table

STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def render_validation(report: ValidationReport, console: Console, hide_info: bool = False) -> None:
    """The summary, the findings table (without infos under ``hide_info``) and the verdict line."""
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold", overflow="fold")
    summary.add_column(overflow="fold")
    if report.path:
        summary.add_row("path", escape(printable(report.path)))
    if report.format:
        summary.add_row("format", f"{report.format}  ({escape('; '.join(report.detected_by))})")
        summary.add_row("EAGLE", f"{report.eagle_version}, {report.architecture}")
    if report.flags:
        summary.add_row("flags", ", ".join(f"{k}={'on' if v else 'off'}" for k, v in report.flags.model_dump().items()))
    if report.format:
        ids = "absent" if report.aux_layer_ids is None else f"{report.aux_layer_ids} ({report.aux_layer_convention})"
        summary.add_row("aux layer ids", ids)
    summary.add_row("engines", ", ".join(report.engines) + ("" if report.numeric_scan else "  (no numeric scan)"))
    if report.hub is not None:
        summary.add_row("read", hub_line(report.hub))
    console.print(summary)
    shown = [f for f in report.findings if not (hide_info and f.severity == "info")]
    if shown:
        table = make_table("severity", "code", "engine", "finding", show_lines=False)
        for f in shown:
            table.add_row(f"[{STYLE[f.severity]}]{f.severity}[/]", f.code, f.engine or "-", escape(f.message))
        console.print(table)
    if report.ignored:
        console.print("ignored (--ignore): " + "; ".join(escape(f"[{f.code}] {f.message}") for f in report.ignored),
                      style="dim")
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = sum(f.severity == "warning" for f in report.findings)
    verdict = "[bold green]ok[/]" if report.ok else "[bold red]FAILED[/]"
    hidden = len(report.findings) - len(shown)
    console.print(f"{verdict}: {errors} error(s), {warnings} warning(s)"
                  + (f", {hidden} info(s) hidden (--hide-info; --json lists them)" if hidden else ""))
