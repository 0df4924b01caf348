"""``eagleconv upgrade`` and ``downgrade``: thin click commands over eagleconv.eagle31.api.

Registered on the main group by importing this module (see the bottom of main.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from ..spec.report import TransformReport
from .app import FORMATS, _progress, cli, run_command
from .options import allow_no_verifier_option, parse_size, verifier_option

_CAPTURED = ("safetensors file with 'aux_hidden_states' [..., K x target_hidden] captured from the target "
             "(optionally 'input_ids', 'next_token_ids', 'sequence_lengths')")
CALIBRATION_HELP = {
    "upgrade": f"{_CAPTURED}, to set the new norm weights so that each aux state keeps its typical scale; the "
               "divergence is measured on these states.",
    "downgrade": f"{_CAPTURED}, to fold each aux state's typical 1/RMS into fc when the fc_norm is removed (with "
                 "--allow-lossy); the divergence is measured on these states.",
}
F = TypeVar("F", bound=Callable[..., object])


def _calibration_option(command: str) -> Callable[[F], F]:
    return click.option("--calibration", type=click.Path(path_type=str), metavar="FILE",
                        help=CALIBRATION_HELP[command])


_SHARED_OPTIONS = (
    click.option("--target", type=click.Path(path_type=str),
                 help="Target model directory to capture aux states from (with --calibration: only lends the "
                      "embedding / LM head rows the drafter borrows)."),
    click.option("--prompts", type=click.Path(path_type=str), help="JSON list of token-id lists to run the target on."),
    click.option("--to", "to", type=click.Choice(FORMATS), help="Destination layout (default: the source's)."),
    click.option("--max-shard-size", metavar="SIZE", help="Split the output into shards of at most SIZE (e.g. 2GB)."),
    click.option("--overwrite", is_flag=True,
                 help="Replace DST if it exists (atomically, after the new one is complete)."),
    click.option("--force", is_flag=True, help="Proceed even if the source has error-severity findings."),
    click.option("--no-numeric", is_flag=True, help="Skip the NaN/Inf check of the written weights."),
    click.option("--json", "as_json", is_flag=True, help="Print the report as JSON."),
    click.option("--gguf-target", type=click.Path(path_type=str), metavar="TARGET",
                 help="--to gguf: the target's .gguf or HF directory whose tokenizer and layer count the draft carries."),
    click.option("--outtype", type=click.Choice(["f32", "f16", "bf16"]), help="--to gguf: convert float weights."),
    verifier_option,
    allow_no_verifier_option,
)


def _shared_options(command: str) -> Callable[[F], F]:
    """The options upgrade and downgrade share (--calibration with each command's own help), in this order."""
    def decorate(func: F) -> F:
        for option in reversed((_calibration_option(command), *_SHARED_OPTIONS)):
            func = option(func)
        return func

    return decorate


def _emit(report: TransformReport, as_json: bool) -> tuple[TransformReport, int]:
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        return report, 0
    from .render import render_convert

    render_convert(report)
    click.echo(f"EAGLE {report.eagle_version_before} -> {report.eagle_version_after} "
               f"({'exact' if report.exact else 'changes the drafter'})")
    for change in report.changes:
        click.echo(f"  {'exact' if change.exact else 'changes the function'}: {change.change}")
    for r in report.refits:
        click.echo(f"  refit {', '.join(r.tensors)} on {r.tokens} tokens: relative residual "
                   f"{r.residual_before:.3g} -> {r.residual_after:.3g}"
                   + (f" (held out: {r.residual_held_out:.3g})" if r.residual_held_out is not None else ""))
    if report.divergence:
        click.echo(f"divergence from the source per draft step ({report.compute_dtype}):")
        unit = {s.step: s for s in report.divergence_unit_weights}
        for s in report.divergence:
            line = f"  step {s.step}: top-1 agreement {s.top1_agreement:.3f}, max abs err {s.max_abs_err:.3g}"
            if s.step in unit and report.initialisation == "calibrated":
                line += (f" (with unit norm weights instead of calibrated ones: top-1 agreement "
                         f"{unit[s.step].top1_agreement:.3f}, max abs err {unit[s.step].max_abs_err:.3g})")
            click.echo(line)
    return report, 0


@cli.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--style", type=click.Choice(["fc_norm", "norm_before_fc"]), default="fc_norm", show_default=True,
              help="fc_norm: one RMSNorm per aux state (the paper, vLLM #42764); norm_before_fc: one over the "
                   "concatenation (speculators #692).")
@click.option("--fc-norm/--no-fc-norm", default=True, show_default=True,
              help="Add the aux-state normalisation (in --style).")
@click.option("--norm-output/--no-norm-output", default=True, show_default=True,
              help="Feed the post-norm hidden state to the next draft step.")
@click.option("--refit/--no-refit", default=True, show_default=True,
              help="With captured aux states, refit by least squares the weights the new norms make stale (fc; "
                   "norm.weight with lm_head for norm_output, logits unchanged).")
@_shared_options("upgrade")
@click.pass_context
def upgrade(ctx: click.Context, src: str, dst: str, style: str, fc_norm: bool, norm_output: bool, refit: bool,
            calibration: str | None, target: str | None, prompts: str | None, to: str | None,
            max_shard_size: str | None, overwrite: bool, force: bool, no_numeric: bool, as_json: bool,
            verifier: str | None = None, allow_no_verifier: bool = False, gguf_target: str | None = None,
            outtype: str | None = None) -> None:
    """EAGLE-3 -> EAGLE-3.1: a starting point for 3.1 fine-tuning.

    With --no-fc-norm --no-norm-output the tensors are copied byte for byte ("exact": true).
    """
    from ..eagle31.api import upgrade as run
    shard = parse_size(max_shard_size)

    def body():
        with _progress() as bar:
            report = run(src, dst, style=style, fc_norm=fc_norm, norm_output=norm_output, refit=refit,
                         calibration=calibration,
                         target=target, prompts=prompts, to=to, overwrite=overwrite, force=force, verifier=verifier,
                         max_shard_size=shard, numeric=not no_numeric, on_total=bar.on_total, on_bytes=bar.on_bytes,
                         progress=bar.step, require_verifier=not allow_no_verifier, gguf_target=gguf_target,
                         outtype=outtype)
        return _emit(report, as_json)

    run_command(ctx, as_json, body)


@cli.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--allow-lossy", is_flag=True, help="Remove fc_norm / norm_output even though that changes the drafter.")
@_shared_options("downgrade")
@click.pass_context
def downgrade(ctx: click.Context, src: str, dst: str, allow_lossy: bool, calibration: str | None, target: str | None,
              prompts: str | None, to: str | None, max_shard_size: str | None, overwrite: bool, force: bool,
              no_numeric: bool, as_json: bool, verifier: str | None = None, allow_no_verifier: bool = False,
              gguf_target: str | None = None, outtype: str | None = None) -> None:
    """EAGLE-3.1 -> EAGLE-3 for engines without 3.1 support.

    Exact folds always; a change to what the drafter computes exits 1 and writes nothing unless --allow-lossy.
    """
    from ..eagle31.api import downgrade as run
    shard = parse_size(max_shard_size)

    def body():
        with _progress() as bar:
            report = run(src, dst, allow_lossy=allow_lossy, calibration=calibration, target=target, prompts=prompts,
                         to=to, overwrite=overwrite, force=force, verifier=verifier, max_shard_size=shard,
                         numeric=not no_numeric, on_total=bar.on_total, on_bytes=bar.on_bytes,
                         progress=bar.step, require_verifier=not allow_no_verifier, gguf_target=gguf_target,
                         outtype=outtype)
        return _emit(report, as_json)

    run_command(ctx, as_json, body)
