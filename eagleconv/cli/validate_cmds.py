"""``eagleconv validate``, ``lint`` and ``findings``: thin click commands over eagleconv.validation.

Registered on the main group by importing this module (see the bottom of main.py).
"""

from __future__ import annotations

import click

from .main import FORMATS, _console, _progress, cli, run_command

ENGINE_HELP = ("Engine profile to check against (repeatable): vllm, sglang, trtllm, tokenspeed, a release such as "
               "vllm:0.32 or vllm:52a31cc, or all. Default: vllm.")


def _emit(report, as_json: bool, strict: bool = False) -> tuple[object, int]:
    """Print the report; exit 1 on error findings (or, with --strict, on warnings too)."""
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        from .render_validation import render_validation

        render_validation(report, _console())
    failed = not report.ok or (strict and any(f.severity == "warning" for f in report.findings))
    return report, 1 if failed else 0


STRICT_HELP = "Exit 1 on warnings too (for pre-upload gates)."
IGNORE_HELP = ("Finding code judged acceptable (repeatable, e.g. --ignore EC023): its warnings and infos are listed "
               "as ignored and do not fail --strict. Errors cannot be ignored.")


def ignore_option(f):
    return click.option("--ignore", "ignore", multiple=True, metavar="CODE", help=IGNORE_HELP)(f)


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--engine", "engines", multiple=True, default=("vllm",), show_default=True, metavar="ENGINE", help=ENGINE_HELP)
@click.option("--target", metavar="DIR_OR_CONFIG_JSON", help="Target model directory or config.json (no weights needed).")
@click.option("--tp", type=click.IntRange(min=1), help="Check tensor-parallel sharding for this many ranks.")
@click.option("--no-numeric", is_flag=True, help="Skip the NaN/Inf/zero scan: read headers and d2t/t2d only.")
@click.option("--from", "from_format", type=click.Choice(FORMATS), help="Read PATH as this layout instead of detecting it.")
@click.option("--allow-pickle", is_flag=True, help="Load .bin/.pt pickles with torch.load(weights_only=True).")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@ignore_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def validate(ctx: click.Context, path: str, engines: tuple[str, ...], target: str | None, tp: int | None,
             no_numeric: bool, from_format: str | None, allow_pickle: bool, strict: bool, ignore: tuple[str, ...],
             as_json: bool) -> None:
    """Check drafter checkpoint PATH (a directory or hf://ORG/NAME[@REV]) against what each engine will do with it.

    Exit 0: no error finding; 1: error findings; 2: unreadable or unsafe input.
    """
    from ..validation import validate as validate_checkpoint

    def body():
        with _progress(enabled=not as_json and not no_numeric, label="scanning") as progress:
            report = validate_checkpoint(path, engines=engines, target=target, tp=tp, numeric=not no_numeric,
                                         from_format=from_format, allow_pickle=allow_pickle, progress=progress,
                                         ignore=ignore)
        return _emit(report, as_json, strict)

    run_command(ctx, as_json, body)


@cli.command()
@click.argument("config", type=click.Path(path_type=str))
@click.option("--engine", "engines", multiple=True, default=("vllm",), show_default=True, metavar="ENGINE", help=ENGINE_HELP)
@click.option("--target", metavar="DIR_OR_CONFIG_JSON", help="Target model directory or config.json.")
@click.option("--tp", type=click.IntRange(min=1), help="Check tensor-parallel sharding for this many ranks.")
@click.option("--from", "from_format", type=click.Choice(FORMATS), help="Read CONFIG as this layout's config.")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@ignore_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def lint(ctx: click.Context, config: str, engines: tuple[str, ...], target: str | None, tp: int | None,
         from_format: str | None, strict: bool, ignore: tuple[str, ...], as_json: bool) -> None:
    """Check a drafter config.json alone, without tensors (missing shape fields are findings)."""
    from ..validation import lint as lint_config

    run_command(ctx, as_json, lambda: _emit(lint_config(config, engines=engines, target=target, tp=tp,
                                                         from_format=from_format, ignore=ignore), as_json, strict))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the code table as JSON.")
def findings(as_json: bool) -> None:
    """Print the findings reference: every code, its meaning, severity policy and engines."""
    if as_json:
        import json
        from dataclasses import asdict

        from ..validation.codes import CODES
        from ..validation.reference import engines_by_code

        engines = engines_by_code()
        click.echo(json.dumps([{**asdict(c), "engines": engines[c.code]} for c in CODES.values()], indent=2))
        return
    from ..validation.reference import render_findings

    click.echo(render_findings(), nl=False)
