"""click options shared by the commands that write a drafter (convert, and any command built on it)."""

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
