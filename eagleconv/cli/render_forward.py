"""Human rendering of validate --forward and diff reports with rich."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..spec.report import DiffReport, DiffStep, ForwardReport
from .render import table


def _steps_table(title: str, steps: list[DiffStep]) -> Table:
    columns = ("step", "top-1 agreement", "max abs err", "max rel err")
    out = table(*columns, right=columns, title=title, title_justify="left")
    for s in steps:
        out.add_row(str(s.step), f"{s.top1_agreement:.1%}", f"{s.max_abs_err:.3g}", f"{s.max_rel_err:.3g}")
    return out


def render_forward(report: ForwardReport, console: Console) -> None:
    console.print(f"[bold]forward[/] {report.architecture}, EAGLE-{report.eagle_version}: compute {report.compute_dtype}, "
                  f"output {report.output_dtype}, RMSNorm recipe {report.recipe}, backend {report.backend}")
    console.print(f"inputs: {escape(report.inputs)}; aux layers {report.aux_layer_ids}")
    for note in [*report.borrowed, *report.notes]:
        console.print(f"[dim]note: {escape(note)}[/]")
    steps = table("step", "draft tokens", "fed-back RMS", "finite", right=("step", "fed-back RMS", "finite"))
    for s in report.steps:
        shown = " ".join(map(str, s.tokens[:8])) + (" ..." if len(s.tokens) > 8 else "")
        steps.add_row(str(s.step), shown, f"{s.feedback_rms:.4f}", "yes" if s.finite else "[bold red]NO[/]")
    console.print(steps)
    if report.against_torch:
        console.print(_steps_table(f"backend {report.backend} ({report.kernels}, {report.device}) against the torch "
                                   "backend", report.against_torch))
    if report.engines:
        numbers = [str(s.step) for s in report.steps] + ["max abs err"]
        engines = table("engine", "loads", *numbers, right=numbers, title="as each engine reads it: top-1 agreement "
                        "with the intended math, per draft step", title_justify="left")
        for e in report.engines:
            cells = [f"{s.top1_agreement:.0%}" for s in e.steps] or ["-"] * len(report.steps)
            worst = f"{max(s.max_abs_err for s in e.steps):.3g}" if e.steps else "-"
            engines.add_row(escape(e.engine), "yes" if e.runs else "[bold red]no[/]", *cells, worst)
        console.print(engines)
        for e in report.engines:
            for line in ([e.reason] if e.reason else []) + e.differs:
                console.print(f"[yellow]{escape(e.engine)}[/]: {escape(line)}")


def render_diff(report: DiffReport, console: Console) -> None:
    console.print(f"A: {escape(report.a)}\nB: {escape(report.b)}")
    console.print(f"compute {report.compute_dtype}, output {report.output_dtype}; inputs: {escape(report.inputs)}")
    for note in report.notes:
        console.print(f"[dim]note: {escape(note)}[/]")
    console.print(_steps_table("per draft step", report.steps))
    console.print("[bold green]identical[/]" if report.identical else "[bold yellow]different[/]")
