"""``eagleconv validate``, ``lint`` and ``findings``: thin click commands over eagleconv.validation.

Registered on the main group by importing this module (see the bottom of main.py).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from .app import FORMATS, _console, _progress, cli, run_command
from .options import DOWNLOAD_HELP, STRICT_HELP, engines_option, hide_info_option, ignore_option

if TYPE_CHECKING:
    from rich.status import Status


def _passive_omp() -> None:
    """Before torch loads: idle OpenMP threads sleep instead of spinning (unless OMP_WAIT_POLICY is set).

    The forward's products read each weight once per step (a few rows of activations), so a spinning
    thread only burns CPU; on a shared 2-core machine it took CPU from the working one (benchmarks/RESULTS.md).
    Same threads, same partitioning of the work: the numbers do not change.
    """
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class _status:
    """A rich spinner on stderr while the forward pass runs, when stderr is a terminal (with --json too)."""

    def __init__(self, label: str):
        self.enabled, self.label = sys.stderr.isatty(), label
        self._s: Status | None = None

    def __enter__(self) -> _status:
        if self.enabled:
            self._s = _console(stderr=True).status(self.label)
            self._s.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._s is not None:
            self._s.__exit__(None, None, None)


def _emit(report, as_json: bool, strict: bool = False, hide_info: bool = False) -> tuple[object, int]:
    """Print the report; exit 1 on error findings (or, with --strict, on warnings too)."""
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        from .render_validation import render_validation

        render_validation(report, _console(), hide_info=hide_info)
        if getattr(report, "forward", None) is not None:
            from .render_forward import render_forward

            render_forward(report.forward, _console())
    failed = not report.ok or (strict and any(f.severity == "warning" for f in report.findings))
    return report, 1 if failed else 0


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@engines_option
@click.option("--target", metavar="DIR_OR_CONFIG_JSON", help="Target model directory or config.json (no weights needed).")
@click.option("--tp", type=click.IntRange(min=1), help="Check tensor-parallel sharding for this many ranks.")
@click.option("--no-numeric", is_flag=True, help="Skip the NaN/Inf/zero scan: read headers and d2t/t2d only.")
@click.option("--from", "from_format", type=click.Choice(FORMATS), help="Read PATH as this layout instead of detecting it.")
@click.option("--allow-pickle", is_flag=True, help="Load .bin/.pt pickles with torch.load(weights_only=True).")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@click.option("--forward", "forward", is_flag=True,
              help="Also run the drafter (vLLM's math) for --steps draft steps, and once per --engine as that engine "
                   "reads it; reports draft tokens, the fed-back hidden state's RMS and per-engine top-1 agreement.")
@click.option("--steps", type=click.IntRange(min=1), default=4, show_default=True, help="--forward: draft steps K.")
@click.option("--prompts", type=click.Path(path_type=str),
              help="--forward: JSON list of token-id lists run through --target (a directory with weights).")
@click.option("--seed", type=int, default=0, show_default=True, help="--forward: seed of the synthetic inputs.")
@click.option("--dtype", "compute_dtype", type=click.Choice(["float32", "float64", "checkpoint"]), default="float32",
              show_default=True, help="--forward: compute dtype ('checkpoint': as the engine runs it).")
@click.option("--recipe", type=click.Choice(["native", "one_round"]), default="native", show_default=True,
              help="--forward: RMSNorm rounding recipe (vLLM IR native, or the vllm_c one-round kernels).")
@click.option("--backend", type=click.Choice(["torch", "triton"]), default="torch", show_default=True,
              help="--forward: RMSNorm implementation. triton: eagleconv.kernels' fused kernels, also compared per "
                   "step with the torch backend (on CPU only through Triton's interpreter, TRITON_INTERPRET=1).")
@click.option("--device", default="cpu", show_default=True, help="--forward: torch device to run on (cpu, cuda).")
@ignore_option
@hide_info_option
@click.option("--download", is_flag=True, help=DOWNLOAD_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def validate(ctx: click.Context, path: str, engines: tuple[str, ...], target: str | None, tp: int | None,
             no_numeric: bool, from_format: str | None, allow_pickle: bool, strict: bool, forward: bool, steps: int,
             prompts: str | None, seed: int, compute_dtype: str, recipe: str, backend: str, device: str,
             ignore: tuple[str, ...], hide_info: bool, download: bool, as_json: bool) -> None:
    """Check drafter checkpoint PATH (a directory or hf://ORG/NAME[@REV]) against what each engine will do with it.

    Exit 0: no error finding; 1: error findings; 2: unreadable or unsafe input.
    """
    from ..validation import validate as validate_checkpoint
    from ..validation.api import add_forward, apply_ignore

    if not forward and prompts is not None:
        raise click.UsageError("--prompts needs --forward")

    def body():
        from ..hubread.remote import reads_headers
        from ..io.remote import needs_download

        if forward and reads_headers(path, download):
            raise needs_download("--forward", path)
        if forward:
            from ..support._extras import need

            need("torch", "validate --forward")  # before the scan, which can take minutes
        with _progress(enabled=not no_numeric, label="scanning") as bar:
            report = validate_checkpoint(path, engines=engines, target=target, tp=tp, numeric=not no_numeric,
                                         from_format=from_format, allow_pickle=allow_pickle, progress=bar.bytes,
                                         ignore=ignore, download=download)
        if forward:
            _passive_omp()
            with _status(f"running {steps} draft steps"):
                add_forward(report, path, engines=engines, target=target, allow_pickle=allow_pickle,
                            from_format=from_format, steps=steps, prompts=prompts, seed=seed, dtype=compute_dtype,
                            recipe=recipe, backend=backend, device=device)
            report = apply_ignore(report, ignore)
        return _emit(report, as_json, strict, hide_info)

    run_command(ctx, as_json, body)


@cli.command()
@click.argument("config", type=click.Path(path_type=str))
@engines_option
@click.option("--target", metavar="DIR_OR_CONFIG_JSON", help="Target model directory or config.json.")
@click.option("--tp", type=click.IntRange(min=1), help="Check tensor-parallel sharding for this many ranks.")
@click.option("--from", "from_format", type=click.Choice(FORMATS), help="Read CONFIG as this layout's config.")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@ignore_option
@hide_info_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def lint(ctx: click.Context, config: str, engines: tuple[str, ...], target: str | None, tp: int | None,
         from_format: str | None, strict: bool, ignore: tuple[str, ...], hide_info: bool, as_json: bool) -> None:
    """Check a drafter config.json alone, without tensors (missing shape fields are findings)."""
    from ..validation import lint as lint_config

    run_command(ctx, as_json, lambda: _emit(lint_config(config, engines=engines, target=target, tp=tp,
                                                         from_format=from_format, ignore=ignore), as_json, strict,
                                                   hide_info))


@cli.command()
@click.argument("codes", nargs=-1, metavar="[CODE]...")
@click.option("--json", "as_json", is_flag=True, help="Print the code table as JSON.")
@click.pass_context
def findings(ctx: click.Context, codes: tuple[str, ...], as_json: bool) -> None:
    """Print the findings reference: every code (or only CODE...), its meaning, severity policy and engines."""
    from ..validation.reference import render_codes, render_findings, select_codes

    def body():
        wanted = select_codes(codes) if codes else None
        if as_json:
            import json
            from dataclasses import asdict

            from ..validation.codes import CODES
            from ..validation.reference import engines_by_code

            engines = engines_by_code()
            click.echo(json.dumps([{**asdict(CODES[c]), "engines": engines[c]} for c in wanted or CODES], indent=2))
        else:
            click.echo(render_codes(wanted) if wanted else render_findings(), nl=False)
        return None, 0

    run_command(ctx, as_json, body)


@cli.command()
@click.argument("a", type=click.Path(path_type=str))
@click.argument("b", type=click.Path(path_type=str))
@click.option("--steps", type=click.IntRange(min=1), default=4, show_default=True, help="Draft steps K.")
@click.option("--target", help="Target model directory (with weights: real aux states; config only: its layer count).")
@click.option("--prompts", type=click.Path(path_type=str), help="JSON list of token-id lists run through --target.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic inputs.")
@click.option("--dtype", "compute_dtype", type=click.Choice(["float32", "float64", "checkpoint"]), default="float32",
              show_default=True, help="Compute dtype ('checkpoint': as the engine runs it).")
@click.option("--allow-pickle", is_flag=True, help="Load .bin/.pt pickles with torch.load(weights_only=True).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def diff(ctx: click.Context, a: str, b: str, steps: int, target: str | None, prompts: str | None, seed: int,
         compute_dtype: str, allow_pickle: bool, as_json: bool) -> None:
    """Run drafters A and B on identical inputs and compare their draft steps.

    Exit 0 when identical (same tokens, bit-identical logits at every step), 1 when they differ, 2 for bad input.
    """
    _passive_omp()

    def body():
        from ..gguf.gguf_file import open_if_gguf
        from ..readers.loading import open_checkpoint

        for path in (a, b):  # a missing or unsafe checkpoint is refused before torch is imported or anything runs
            open_checkpoint(path, allow_pickle=allow_pickle, open_file=open_if_gguf)
        from ..forward import diff as diff_drafters

        with _status(f"running {steps} draft steps of each drafter"):
            report = diff_drafters(a, b, steps=steps, target=target, prompts=prompts, seed=seed, dtype=compute_dtype,
                                   allow_pickle=allow_pickle)
        if as_json:
            click.echo(report.model_dump_json(indent=2))
        else:
            from .render_forward import render_diff

            render_diff(report, _console())
        return report, 0 if report.identical else 1

    run_command(ctx, as_json, body)
