"""The ``eagleconv`` command line: a thin click layer over the library.

Exit codes: 0 success, 1 error-severity findings, 2 bad usage or
unreadable/unsafe input.  Errors print one line (``--debug`` adds the
traceback).  ``--json`` prints the same pydantic report the library returns.
Nothing here imports torch, so ``--help`` and ``inspect`` stay fast.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypedDict

import click

from .app import FORMATS, _console, _progress, cli, run_command
from .options import DOWNLOAD_HELP, WEIGHTS_DOWNLOAD_HELP, allow_no_verifier_option, parse_size, verifier_option

if TYPE_CHECKING:
    from ..spec.drafter import AuxConvention


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--from", "from_format", type=click.Choice(FORMATS), help="Read as this layout instead of detecting it.")
@click.option("--allow-pickle", is_flag=True, help="Load .bin/.pt pickles with torch.load(weights_only=True).")
@click.option("--download", is_flag=True, help=DOWNLOAD_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def inspect(ctx: click.Context, path: str, from_format: str | None, allow_pickle: bool, download: bool,
            as_json: bool) -> None:
    """Describe a drafter (a directory or hf://ORG/NAME[@REV]): layout, EAGLE version, flags, dims, aux ids, vocab mapping, tensors."""
    from ..readers.inspection import inspect as inspect_checkpoint

    def body():
        report = inspect_checkpoint(path, from_format=from_format, allow_pickle=allow_pickle, download=download)
        if as_json:
            click.echo(report.model_dump_json(indent=2))
        else:
            from .render import render_inspect

            render_inspect(report, _console())
        return report, 0

    run_command(ctx, as_json, body)


@cli.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--to", "to", required=True, type=click.Choice(FORMATS), help="Destination layout.")
@click.option("--from", "from_format", type=click.Choice(FORMATS), help="Read SRC as this layout instead of detecting it.")
@click.option("--dry-run", is_flag=True, help="Print the plan (source -> destination, shape, dtype, action); write nothing.")
@click.option("--drop", multiple=True, metavar="TENSOR",
              help="Drop a tensor the destination cannot hold (lossy), e.g. --drop embed_tokens.")
@click.option("--aux-layer-ids", metavar="I,J,K", help="Stamp the target layers the drafter reads (comma-separated).")
@click.option("--aux-convention", type=click.Choice(["hidden_state_index", "layer_output"]), default="hidden_state_index",
              show_default=True, help="Numbering of --aux-layer-ids.")
@click.option("--max-shard-size", metavar="SIZE", help="Split the output into shards of at most SIZE (e.g. 2GB).")
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists (atomically, after the new one is complete).")
@click.option("--force", is_flag=True, help="Convert even if the source has error-severity findings.")
@click.option("--no-numeric", is_flag=True,
              help="Skip the NaN/Inf check of the weights (it reads the written bytes back from the page cache).")
@click.option("--no-fsync", is_flag=True,
              help="Skip fsync (faster on slow disks; still atomic, but a power loss may lose the output).")
@click.option("--allow-pickle", is_flag=True, help="Load .bin/.pt pickles with torch.load(weights_only=True).")
@click.option("--download", is_flag=True, help=WEIGHTS_DOWNLOAD_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--target", type=click.Path(path_type=str), metavar="TARGET",
              help="--to gguf: the target model's .gguf or HF directory (tokenizer, layer count); required there.")
@click.option("--outtype", type=click.Choice(["f32", "f16", "bf16"]),
              help="--to gguf: convert float weights to this type (default: keep each dtype; norms are F32).")
@verifier_option
@allow_no_verifier_option
@click.pass_context
def convert(ctx: click.Context, src: str, dst: str, to: str, from_format: str | None, dry_run: bool, drop: tuple[str, ...],
            aux_layer_ids: str | None, aux_convention: AuxConvention, max_shard_size: str | None, overwrite: bool, force: bool,
            no_numeric: bool, no_fsync: bool, allow_pickle: bool, download: bool, as_json: bool, verifier: str | None = None,
            allow_no_verifier: bool = False, target: str | None = None, outtype: str | None = None) -> None:
    """Convert drafter SRC to layout --to at DST, exactly (tensor bytes are preserved).

    --to gguf writes llama.cpp's EAGLE-3 draft: DST is the .gguf file itself, and --target is required.
    """
    from ..conversion import convert as convert_checkpoint

    ids = None
    if aux_layer_ids:
        try:
            ids = [int(x) for x in aux_layer_ids.split(",") if x.strip()]
        except ValueError:
            raise click.BadParameter("expected comma-separated integers", param_hint="--aux-layer-ids") from None
    shard = parse_size(max_shard_size)

    def body():
        with _progress(enabled=not dry_run) as bar:
            report = convert_checkpoint(src, dst, to, from_format=from_format, dry_run=dry_run, force=force,
                                        overwrite=overwrite, drop=drop, aux_layer_ids=ids,
                                        aux_convention=aux_convention, verifier=verifier, max_shard_size=shard,
                                        allow_pickle=allow_pickle, durable=not no_fsync,
                                        numeric=not no_numeric, on_bytes=bar.on_bytes, on_total=bar.on_total,
                                        require_verifier=not allow_no_verifier, target=target, outtype=outtype,
                                        download=download)
        if as_json:
            click.echo(report.model_dump_json(indent=2))
        else:
            from .render import render_convert

            render_convert(report)
        return report, 0

    run_command(ctx, as_json, body)


@cli.command()
@click.option("--out", "out", type=click.Path(path_type=str), default="schemas", show_default=True,
              help="Directory to write the JSON Schemas into.")
@click.pass_context
def schema(ctx: click.Context, out: str) -> None:
    """Write the JSON Schemas of configs, the drafter spec and reports into --out."""
    from ..readers.schemas import write_schemas

    def body():
        for path in write_schemas(out):
            click.echo(str(path))
        return None, 0

    run_command(ctx, False, body)


class _LayoutRow(TypedDict):
    name: str
    producer: str
    description: str
    architectures: list[str]
    aux_layer_convention: str


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def formats(as_json: bool) -> None:
    """List the checkpoint layouts eagleconv reads and writes."""
    from ..formats import LAYOUTS

    rows: list[_LayoutRow] = [{"name": layout.name, "producer": layout.producer, "description": layout.description,
             "architectures": sorted(layout.architectures), "aux_layer_convention": layout.aux_convention}
            for layout in LAYOUTS.values()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from .render import table

    layouts = table("name", "producer", "architectures", "description", title="layouts")
    for r in rows:
        layouts.add_row(r["name"], r["producer"], ", ".join(r["architectures"]), r["description"])
    _console().print(layouts)


# The command modules add their commands to `cli` (defined above) as they are imported.
from . import (  # noqa: E402
    audit_cmd,  # noqa: F401
    hub_cmds,  # noqa: F401
    measure_cmd,  # noqa: F401
    simulate_cmd,  # noqa: F401
    transform_cmds,  # noqa: F401
    validate_cmds,  # noqa: F401
)
