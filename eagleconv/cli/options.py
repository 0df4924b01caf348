"""click options shared by several commands (their help is written once, here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


def verifier_option(func: F) -> F:
    """``--verifier NAME_OR_PATH``: passed on as ``verifier=`` to ``conversion.convert``/``plan_conversion``."""
    return click.option(
        "--verifier", "verifier", metavar="NAME_OR_PATH",
        help="The target model the output names (speculators_config.verifier): a Hub id, or a local model "
             "directory whose config.json gives its architectures. speculators' loader needs one.",
    )(func)


def allow_no_verifier_option(func: F) -> F:
    """``--allow-no-verifier``: write a speculators output without a verifier (passed on as ``require_verifier``)."""
    return click.option(
        "--allow-no-verifier", "allow_no_verifier", is_flag=True,
        help="Write a speculators output that names no verifier (speculators' loader then fails, EC043). "
             "Without it, --to speculators needs --verifier unless the source names one.",
    )(func)


def hide_info_option(func: F) -> F:
    """``--hide-info``: validate, lint (the human table only; --json keeps every finding)."""
    return click.option("--hide-info", "hide_info", is_flag=True,
                        help="Leave info findings out of the table (they are counted; --json keeps them).")(func)


ENGINE_HELP = ("Engine profile to check against (repeatable): vllm, sglang, trtllm, tokenspeed, speculators (the "
               "training library's loader; named only, not in all), a release such as vllm:0.32 or vllm:52a31cc, or "
               "all. Default: vllm.")
STRICT_HELP = "Exit 1 on warnings too (for pre-upload gates)."
IGNORE_HELP = ("Finding code judged acceptable (repeatable, e.g. --ignore EC023): its warnings and infos are listed "
               "as ignored and do not fail --strict. Errors cannot be ignored.")


def engines_option(func: F) -> F:
    """``--engine ENGINE`` (repeatable, default vllm): validate, lint, push, pull."""
    return click.option("--engine", "engines", multiple=True, default=("vllm",), show_default=True, metavar="ENGINE",
                        help=ENGINE_HELP)(func)


def ignore_option(func: F) -> F:
    """``--ignore CODE`` (repeatable): validate, lint, push, pull."""
    return click.option("--ignore", "ignore", multiple=True, metavar="CODE", help=IGNORE_HELP)(func)
