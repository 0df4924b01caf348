"""``eagleconv simulate``: a thin click command over eagleconv.simulation."""

from __future__ import annotations

import click

from ..support._process import usable_cores
from ..measurement.report import DEFAULT_MAX_TOKENS
from .app import _console, _progress, cli, run_command
from .options import WEIGHTS_DOWNLOAD_HELP


def render_simulate(report, console) -> None:
    """A small table: the counters, then one acceptance bar per draft position."""
    from .._text import shown
    from .render import table

    drafts = report.num_drafts
    console.print(f"[bold]{report.engine}[/bold]: {len(report.tokens)} prompts, K={report.num_speculative_tokens}, "
                  f"max_tokens {report.max_tokens}: {drafts} drafts, {report.num_accepted_tokens}/"
                  f"{report.num_draft_tokens} draft tokens accepted, acceptance length "
                  f"{'n/a (no drafts verified)' if report.acceptance_length is None else f'{report.acceptance_length:.3f}'}")
    positions = table("position", "accepted", "rate", "", right=("position", "accepted", "rate"), box=None,
                      pad_edge=False)
    for i, n in enumerate(report.accepted_per_position, start=1):  # positions 1..K, as the README's tables
        rate = n / drafts if drafts else 0.0
        positions.add_row(str(i), f"{n}/{drafts}", f"{rate:.1%}", "[green]" + "█" * round(rate * 30) + "[/green]"
                      + "[dim]" + "·" * (30 - round(rate * 30)) + "[/dim]")
    console.print(positions)
    for note in report.notes:
        console.print(f"[dim]note: {shown(note)}[/dim]")


@cli.command()
@click.argument("drafter", type=click.Path(path_type=str))
@click.option("--target", required=True, metavar="DIR", help="Target model directory (Hugging Face layout, with weights).")
@click.option("--prompts", metavar="FILE", help="JSON list of token-id lists (default: four short built-in prompts).")
@click.option("--num-speculative-tokens", "k", type=click.IntRange(min=1), default=3, show_default=True,
              help="Draft tokens proposed per verification round (K, vLLM's num_speculative_tokens).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Tokens to generate per prompt (vLLM's max_tokens, with ignore_eos).")
@click.option("--engine", default="vllm:0.32", show_default=True, metavar="ENGINE",
              help="Engine profile whose reading of the drafter is simulated: a vLLM release, or llama.cpp "
                   "(--max-tokens is the request's n_predict or -n, K is --spec-draft-n-max).")
@click.option("--llamacpp-loop", type=click.Choice(("server", "simple")), default="server", show_default=True,
              help="llama.cpp only: whose loop, llama-server's (what is deployed: the first token sampled from the "
                   "prompt, drafts cut to the tokens left, exactly --max-tokens) or llama-speculative-simple's "
                   "(drafts before the first token, runs past -n).")
@click.option("--p-min", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="llama.cpp only: --spec-draft-p-min, stop drafting when the top token's probability is lower.")
@click.option("--target-runtime", type=click.Choice(("auto", "eagleconv", "transformers")), default="auto",
              show_default=True, help="What computes the target: eagleconv's own Llama/Qwen3/DeepSeek-V3 forward (no transformers "
              "import), transformers, or auto (eagleconv where it understands the whole config, else transformers).")
@click.option("--threads", type=click.IntRange(min=1), default=None, metavar="N",
              help="CPU threads (torch's intra-op threads) for the forward passes: 1 to the CPUs this process may "
              f"use ({usable_cores()} here).  Default: the cores other processes leave idle, measured while torch "
              "loads (every core on an idle machine, 1 on a busy one): a step's thousands of small products wait "
              "for their slowest thread, so threads on busy cores make simulate several times slower.")
@click.option("--device", default="cpu", show_default=True, metavar="DEVICE",
              help="cpu, or cuda (eagleconv's target runtime on a CUDA GPU; refused where there is none).")
@click.option("--download", is_flag=True, help=WEIGHTS_DOWNLOAD_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def simulate(ctx: click.Context, drafter: str, target: str, prompts: str | None, k: int, max_tokens: int, engine: str,
             llamacpp_loop: str, p_min: float, target_runtime: str, threads: int | None, device: str,
             download: bool, as_json: bool) -> None:
    """Greedy speculative decoding offline: the counters and drafts vLLM would produce, before deploying."""

    def body():
        # OpenMP's own wait policy (spin briefly, then sleep), not validate's PASSIVE: a decode step is thousands
        # of ~0.1 ms products, and waking sleeping threads for each made the SmolLM2 pair 1.3-1.7x slower on an
        # idle machine (benchmarks/RESULTS.md).  On a busy machine the default threads are fewer instead (one on
        # a loaded 2-core machine: no team, so nothing spins), chosen in eagleconv.simulation from others' CPU use.
        from ..hubread.download import local_path
        from ..io.hub_paths import is_hf_url, require_download
        from ..io.reader import require_exists

        require_download(drafter, "simulate", download)  # hf://: the verified snapshot, only with --download
        for path in (target,) if is_hf_url(drafter) else (drafter, target):  # before torch or a download
            require_exists(path)
        source = local_path(drafter)

        from ..simulation import SimulateError
        from ..simulation import simulate as run

        with _progress() as bar:
            report = run(source, target, prompts, num_speculative_tokens=k, max_tokens=max_tokens, engine=engine,
                         target_runtime=target_runtime, progress=bar.step, threads=threads, device=device,
                         p_min=p_min, llamacpp_loop=llamacpp_loop)
        from ..measurement.readback import counters_broken

        broken = counters_broken(report)  # the rules push --acceptance and --against apply to this report
        if broken is not None:
            raise SimulateError(f"simulate's counters do not add up ({broken}): a bug in eagleconv, please report it")
        if as_json:
            click.echo(report.model_dump_json(indent=2))
        else:
            render_simulate(report, _console())
        return report, 0

    run_command(ctx, as_json, body)
