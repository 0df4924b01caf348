"""Human rendering of inspect and convert reports (rich tables where there are tables)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import click

from .._text import human_bytes, printable
from ..spec.report import ConvertReport, HubSource, InspectReport

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def table(*columns: str, right: Collection[str] = (), **options: Any) -> Table:
    """A rich table whose cells fold onto more lines when the terminal is narrow, instead of ending in an
    ellipsis: a name or a number is never cut.  ``right``: the columns aligned right (numbers).  In the plain
    layout (a pipe or a file without COLUMNS, app.plain_layout) it has no box: one line per row."""
    from rich.table import Table

    from .app import plain_layout

    if plain_layout():
        options = {**options, "box": None, "show_edge": False, "pad_edge": False}
    out = Table(**options)
    for name in columns:
        out.add_column(name, justify="right" if name in right else "left", overflow="fold")
    return out


def grid(*styles: str) -> Table:
    """A borderless key/value grid (one column per style), folding like :func:`table`."""
    from rich.table import Table

    out = Table.grid(padding=(0, 2))
    for style in styles:
        out.add_column(style=style, overflow="fold")
    return out


def hub_line(hub: HubSource) -> str:
    """What a header-only hf:// read cost, and what it did not do."""
    from .._text import human_bytes

    return (f"commit {hub.commit}, headers only: {human_bytes(hub.bytes_transferred)} in {hub.requests} requests "
            "(the NaN/Inf scan, --forward, convert and simulate need the data: --download)")


def render_inspect(report: InspectReport, console: Console) -> None:
    spec = report.spec
    summary = grid("bold", "")
    summary.add_row("path", printable(report.path))
    if report.hub is not None:
        summary.add_row("read", hub_line(report.hub))
    summary.add_row("format", f"{report.format}  ({'; '.join(report.detected_by)})")
    version = report.eagle_version + (f"  ({', '.join(report.eagle31_flags)})" if report.eagle31_flags else "")
    summary.add_row("EAGLE version", version)
    summary.add_row("architecture", f"{report.architecture}  (model_type {spec.model_type})")
    dims = f"hidden {spec.hidden_size}, target hidden {spec.target_hidden_size}, heads {spec.num_attention_heads}"
    if spec.mla:
        m = spec.mla
        dims += (f", MLA q_lora {m.q_lora_rank} kv_lora {m.kv_lora_rank} nope {m.qk_nope_head_dim} "
                 f"rope {m.qk_rope_head_dim} v {m.v_head_dim}")
    else:
        dims += f", kv heads {spec.num_key_value_heads}, head dim {spec.head_dim}"
    dims += f", intermediate {spec.intermediate_size}, layers {spec.num_hidden_layers}"
    summary.add_row("dims", dims)
    flags = ", ".join(f"{k}={'on' if v else 'off'}" for k, v in report.flags.model_dump().items())
    summary.add_row("flags", flags)
    if report.aux_layer_ids is None:
        aux = f"K = {report.num_aux_hidden_states}, ids absent (engines will guess)"
    else:
        aux = f"K = {report.num_aux_hidden_states}, ids {report.aux_layer_ids} ({report.aux_layer_convention})"
        if report.aux_layer_convention != "hidden_state_index":
            aux += f" = {report.aux_layer_ids_hidden_state_index} in vLLM numbering"
    summary.add_row("aux layers", aux)
    v = report.vocab
    summary.add_row("vocab", f"target {v.target_vocab_size}, draft {v.draft_vocab_size}"
                    f"{' (compressed)' if v.compressed else ''}; d2t {'yes' if v.d2t else 'no'}, t2d {'yes' if v.t2d else 'no'}")
    summary.add_row("embed / lm_head", f"embed_tokens from {spec.embed_tokens}, lm_head from {spec.lm_head}")
    summary.add_row("weights", f"{report.weights}: {', '.join(report.files)}  ({human_bytes(report.total_bytes)})")
    console.print(summary)
    tensors = table("name", "shape", "dtype", "bytes", right=("bytes",), title="tensors", show_lines=False)
    for row in report.tensors:
        tensors.add_row(row.name, str(row.shape), row.dtype, human_bytes(row.bytes))
    console.print(tensors)
    for note in report.notes:
        console.print(f"[dim]note:[/dim] {note}")


def render_convert(report: ConvertReport) -> None:
    """The plan as a rich table (--dry-run), then one plain line per copy summary, drop, derivation,
    config change, finding and note.  Plain lines go through click, so a normal convert never pays
    for importing rich (~0.1 s)."""
    if report.dry_run:
        from .app import _console

        plan = table("source", "destination", "shape", "dtype", "action",
                     title=f"plan: {report.source_format} -> {report.destination_format}")
        for row in report.plan:
            action = row.action + (f" ({row.reason})" if row.reason else "")
            plan.add_row(row.source or "-", row.destination or "-", str(row.shape), row.dtype, action)
        _console().print(plan)
    else:
        copied = sum(1 for r in report.plan if r.action == "copy")
        click.echo(f"{click.style('converted', fg='green')} {printable(report.source)} ({report.source_format}) -> "
                   f"{printable(report.destination)} ({report.destination_format}): {copied} tensors copied, "
                   f"{human_bytes(report.bytes_written)}")
    for row in report.plan:
        if row.action == "drop":
            click.echo(f"{click.style('dropped', fg='yellow')} {row.source}: {row.reason}")
        elif row.action == "derive":
            click.echo(f"{click.style('derived', fg='cyan')} {row.destination}: {row.reason}")
        elif row.action == "computed":
            click.echo(f"{click.style('computed', fg='cyan')} {row.destination}: {row.reason}")
    for change in report.config_changes:
        click.echo(f"{click.style('config', fg='yellow')} {change}")
    for finding in report.findings:
        click.echo(f"{click.style(finding.severity, fg='yellow')} [{finding.code}] {finding.message}")
    for note in report.notes:  # a note that is a warning says so itself ("warning: ..."), in yellow
        click.echo(f"{click.style('warning:', fg='yellow')} {note[9:]}" if note.startswith("warning: ")
                   else f"{click.style('note:', dim=True)} {note}")
