"""``eagleconv push`` and ``pull``: thin click commands over eagleconv.hub.

Registered on the main group by importing this module (see the bottom of main.py).
Exit codes: 0 pushed (or staged with --dry-run) / pulled; 1 refused by findings;
2 bad usage, unreadable input, or a Hub failure (push: the report's ``error``, also with --json).
"""

from __future__ import annotations

import click

from .app import _console, _progress, cli, run_command
from .options import engines_option, hide_info_option, ignore_option

TIMEOUT_HELP = ("A deadline per Hub request: its body must be in SECONDS after the request started, plus one second "
                "per 256 KiB received (a slow but steady download goes on, a drip does not); connect at most 10 s, "
                "headers within SECONDS. Default: EAGLECONV_HUB_TIMEOUT, else 60.")


def timeout_option(func):
    return click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                        help=TIMEOUT_HELP)(func)


def render_card(card, console) -> None:
    """What the pulled card states was checked: the engine matrix, then the acceptance (escaped: a card is a
    stranger's text)."""
    from .._text import shown as escape

    for e in card.engines:
        console.print(f"card: {escape(e.engine)}: {e.verdict}" + (f" ({escape(', '.join(e.codes))})" if e.codes else ""))
    a = card.acceptance
    if a is not None:
        rates = ", ".join(f"{r:.3f}" for r in a.acceptance_per_position)
        console.print(f"card: acceptance length {a.acceptance_length} (K={a.num_speculative_tokens}, {escape(a.engine)}"
                      f"{' ' + escape(a.engine_version) if a.engine_version else ''}, {escape(a.source)}; per position "
                      f"{rates}; prompts sha256 {escape(a.prompts_sha256 or 'not recorded')}); AL = "
                      f"{escape(a.definition)}")


def _render_push(report, hide_info: bool = False) -> None:
    from rich.markup import escape

    from .render import human_bytes
    from .render_validation import render_validation

    console = _console()
    render_validation(report.validation, console, hide_info=hide_info)
    for f in report.publish_findings:
        console.print(f"[yellow]{f.code}[/] {escape(f.message)}")
    if report.refused:
        console.print(f"[bold red]push {escape(report.error or 'refused')}[/]; nothing was sent")
        return
    verb = "would upload" if report.dry_run else ("uploaded" if report.commit_oid else "not uploaded")
    console.print(f"{verb} to {escape(report.repo_id)}@{escape(report.revision)}"
                  + (" as a pull request" if report.create_pr else "") + ":")
    for e in report.files:
        console.print(f"  {escape(e.path)}  {human_bytes(e.size)}  sha256 {e.sha256}")
    console.print("  MANIFEST.json")
    for name in report.deleted:
        console.print(f"  (delete stale) {escape(name)}")
    if report.serve_command:
        console.print("serve with:  " + escape(report.serve_command))
    if report.staged:
        console.print(f"staged copy (model card and manifest): {escape(report.staged)}"
                      + ("; nothing else uses it: delete it when done" if report.dry_run else ""))
    for note in report.notes:
        console.print(f"note: {escape(note)}", style="dim")
    if report.commit_oid:
        console.print(f"commit {report.commit_oid}" + (f"  {report.pr_url}" if report.pr_url else ""))
    if report.error:
        console.print(f"[bold red]push failed[/]: {escape(report.error)}")
        for m in report.mismatches:
            console.print(f"  {escape(m)}")
        if report.remote:
            console.print("the remote holds: " + ", ".join(escape(f"{f.path} ({human_bytes(f.size)})") for f in report.remote))
    elif not report.dry_run:
        console.print(f"[bold green]ok[/]: {len(report.files) + 1} files, remote sizes and hashes match the manifest")


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.argument("repo_id")
@click.option("--revision", metavar="BRANCH", help="Branch to commit to (created from main if absent). Default: main.")
@click.option("--create-pr", is_flag=True, help="Open a pull request instead of committing to the branch.")
@click.option("--private", is_flag=True, help="Create the repository private (if it does not exist).")
@click.option("--endpoint", metavar="URL", help="Hub endpoint (default: HF_ENDPOINT or huggingface.co).")
@engines_option
@click.option("--strict", is_flag=True,
              help="Refuse (exit 1) on warnings too, unless --ignore'd (for pre-upload gates).")
@ignore_option
@hide_info_option
@click.option("--no-numeric", is_flag=True, help="Skip the NaN/Inf/zero scan.")
@click.option("--no-forward", is_flag=True, help="Skip the forward pass (draft steps on synthetic inputs).")
@click.option("--base-model", metavar="ORG/NAME", help="The target model's Hub id for the card (when the config "
              "does not record it, or records a local path).")
@click.option("--stage-dir", metavar="DIR", type=click.Path(path_type=str),
              help="Stage into DIR (new) and keep it. Default: a temporary directory, kept only with --dry-run.")
@click.option("--license", "license_id", metavar="ID", default="unknown", show_default=True,
              help="The model card's license (a Hub license identifier such as apache-2.0 or llama3.1).")
@click.option("--message", "commit_message", metavar="TEXT", help="Commit message.")
@click.option("--acceptance", metavar="REPORT.json", type=click.Path(path_type=str),
              help="A simulate or measure --json report: the card states its AL, per-position acceptance, K, engine "
                   "and version and prompts' hash as model-index evaluation results.")
@timeout_option
@click.option("--dry-run", is_flag=True, help="Validate and stage (model card, manifest); print what would be "
              "uploaded; no network.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def push(ctx: click.Context, path: str, repo_id: str, revision: str | None, create_pr: bool, private: bool,
         endpoint: str | None, engines: tuple[str, ...], strict: bool, ignore: tuple[str, ...], hide_info: bool,
         no_numeric: bool,
         no_forward: bool, base_model: str | None, stage_dir: str | None, license_id: str, commit_message: str | None,
         acceptance: str | None, timeout: float | None, dry_run: bool, as_json: bool) -> None:
    """Validate drafter PATH and publish it to Hub repository REPO_ID in one commit, with a model card and manifest.

    Refused (exit 1, no network request) on error findings, on a config that names
    its verifier by a local path (EC080), or with --strict on warnings not
    --ignore'd.  Any Hub failure is exit 2 with the report's error.  The token
    comes from HF_TOKEN or `hf auth login`.
    """
    from ..hub import push as push_drafter

    def body():
        with _progress() as bar:  # one bar per step: scanning, staging copy, hashing, upload
            report = push_drafter(path, repo_id, revision=revision, create_pr=create_pr, private=private,
                                  endpoint=endpoint, engines=engines, strict=strict, ignore=ignore,
                                  numeric=not no_numeric, forward=not no_forward, dry_run=dry_run, stage_dir=stage_dir,
                                  base_model=base_model, license=license_id, timeout=timeout,
                                  commit_message=commit_message, progress=bar.byte_step, acceptance=acceptance)
        if as_json:
            click.echo(report.model_dump_json(indent=2))
        else:
            _render_push(report, hide_info)
        return report, 0 if report.ok else (1 if report.refused else 2)

    run_command(ctx, as_json, body)


@cli.command()
@click.argument("repo_id")
@click.argument("dest", type=click.Path(path_type=str))
@click.option("--revision", metavar="REV", help="Branch, tag or commit (default: main).")
@click.option("--endpoint", metavar="URL", help="Hub endpoint (default: HF_ENDPOINT or huggingface.co).")
@engines_option
@click.option("--ignore", "ignore", multiple=True, metavar="CODE",
              help="Finding code judged acceptable (repeatable): its warnings and infos are listed as ignored. "
                   "Errors cannot be ignored (see --force).")
@click.option("--force", is_flag=True, help="Write DEST even if the drafter has error findings.")
@click.option("--overwrite", is_flag=True, help="Replace an existing DEST, in one atomic swap, if it holds only a "
              "checkpoint (as convert --overwrite).")
@timeout_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def pull(ctx: click.Context, repo_id: str, dest: str, revision: str | None, endpoint: str | None,
         engines: tuple[str, ...], ignore: tuple[str, ...], force: bool, overwrite: bool, timeout: float | None,
         as_json: bool) -> None:
    """Download REPO_ID (ORG/NAME or hf://ORG/NAME[@REV]) through the HF cache, verify its manifest, validate, copy to DEST.

    Only the files MANIFEST.json lists are copied (without a manifest: the
    checkpoint's own files and its README.md).
    """
    from ..hub import pull as pull_drafter

    def body():
        with _progress() as bar:  # one bar per step: download, scan, copy to DEST
            report = pull_drafter(repo_id, dest, revision=revision, endpoint=endpoint, engines=engines, force=force,
                                  ignore=ignore, overwrite=overwrite, timeout=timeout, progress=bar.byte_step)
        if as_json:
            click.echo(report.model_dump_json(indent=2))
        else:
            from rich.markup import escape

            from .render_validation import render_validation

            console = _console()
            render_validation(report.validation, console)
            manifest = {None: "no MANIFEST.json", True: "MANIFEST.json verified"}[report.manifest_verified]
            console.print(f"{escape(report.repo_id)} at {report.commit or '?'}: {len(report.files)} files, {manifest}")
            if report.card is not None:
                render_card(report.card, console)
            for note in report.notes:
                console.print(f"note: {escape(note)}", style="dim")
            if report.destination:
                console.print(f"written to {escape(report.destination)}")
        return report, 0 if report.destination else 1

    run_command(ctx, as_json, body)
