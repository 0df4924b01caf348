"""``eagleconv audit``: many Hub repositories judged from their headers (a thin layer over ``eagleconv.hub.audit``).

Exit 0 when the audit ran, whatever it found; 1 with ``--fail-on`` when a row fails it; 2 for bad usage or a
search the Hub refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import click

from .app import _console, _progress, cli, run_command
from .options import engines_option

if TYPE_CHECKING:
    from ..hub._audit import FailOn


@cli.command()
@click.argument("repos", nargs=-1, metavar="[ORG/NAME[@REV]]...")
@click.option("--from", "from_file", type=click.Path(path_type=str), metavar="FILE",
              help="Also audit the repository ids in FILE, one a line ('#' starts a comment).")
@click.option("--search", "words", metavar="WORDS", help="Also audit the Hub's model search for WORDS (HfApi.list_models).")
@click.option("--author", metavar="ORG", help="Search only ORG's repositories (with or without --search).")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N search results.")
@engines_option
@click.option("--jobs", type=click.IntRange(min=1, max=64), default=8, show_default=True,
              help="Repositories read at once (threads).")
@click.option("--out", type=click.Path(path_type=str), metavar="ROWS_JSONL",
              help="Append each row to this JSONL file as it finishes (fsynced), for --resume.")
@click.option("--resume", is_flag=True, help="Skip the repositories --out already lists (a killed audit goes on).")
@click.option("--fail-on", type=click.Choice(["never", "error", "warning"]), default="never", show_default=True,
              help="Exit 1 when a row has an error finding or was not judged (error), or also a warning (warning).")
@click.option("--endpoint", metavar="URL", help="Hub endpoint (default: HF_ENDPOINT, else huggingface.co).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="A deadline per Hub request: SECONDS after it started, plus a second per 256 KiB received (default: EAGLECONV_HUB_TIMEOUT, else 60).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary (with every row) as JSON.")
@click.pass_context
def audit(ctx: click.Context, repos: tuple[str, ...], from_file: str | None, words: str | None, author: str | None,
          limit: int | None, engines: tuple[str, ...], jobs: int, out: str | None, resume: bool, fail_on: str,
          endpoint: str | None, timeout: float | None, as_json: bool) -> None:
    """Judge Hub drafters from their headers, without downloading a weight: one row per repository.

    Per repository: layout, EAGLE version and 3.1 flags, architecture, aux ids and their convention, each
    --engine's verdict, the first error finding, the commit read and the bytes transferred.
    """
    from ..errors import UsageError
    from ..hub import audit as run_audit
    from ..hub import read_repo_list, search

    def body():
        names = list(repos)
        if from_file is not None:
            names += read_repo_list(from_file)
        if words is not None or author is not None:
            names += search(words, author=author, limit=limit, endpoint=endpoint)
        if not names:
            raise UsageError("nothing to audit: name repositories, --from FILE, or --search WORDS / --author ORG")
        with _progress(label="auditing") as bar:
            step = bar.step
            summary = run_audit(names, engines=engines, jobs=jobs, out=out, resume=resume,
                                fail_on=cast("FailOn", fail_on), endpoint=endpoint, timeout=timeout,
                                progress=(lambda row, done, total: step("auditing", done, total)) if step else None)
        if as_json:
            click.echo(summary.model_dump_json(indent=2))
        else:
            from .render_audit import render_audit

            render_audit(summary, _console())
        return summary, 0 if summary.ok else 1

    run_command(ctx, as_json, body)
