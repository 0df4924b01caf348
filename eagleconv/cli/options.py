"""click options shared by several commands (their help is written once, here)."""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
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


DOWNLOAD_HELP = ("hf://: download the whole snapshot (through the HF cache) instead of reading config, index and "
                 "safetensors headers by range requests.")


WEIGHTS_DOWNLOAD_HELP = ("hf://: download the whole snapshot (through the HF cache); this command needs the weights, "
                         "so an hf:// source is refused without it.")


def engines_option(func: F) -> F:
    """``--engine ENGINE`` (repeatable, default vllm): validate, lint, push, pull."""
    return click.option("--engine", "engines", multiple=True, default=("vllm",), show_default=True, metavar="ENGINE",
                        help=ENGINE_HELP)(func)


def ignore_option(func: F) -> F:
    """``--ignore CODE`` (repeatable): validate, lint, push, pull."""
    return click.option("--ignore", "ignore", multiple=True, metavar="CODE", help=IGNORE_HELP)(func)


# --max-shard-size units: KB/MB/GB/TB are powers of 10, as huggingface_hub's max_shard_size reads them (so "2GB"
# here is what it is in save_torch_state_dict); KiB/MiB/GiB/TiB are powers of 2, the units eagleconv prints sizes in.
SIZE_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([KMGT]I?B)\s*", re.IGNORECASE)


def parse_size(text: str | None, option: str = "--max-shard-size") -> int | None:
    """A size such as ``2GB`` (10**9 bytes), ``1.5GB`` or ``512MiB`` (2**29 bytes) in bytes; None stays None.

    A number and a unit, case-insensitive, optional space between; fractions are exact and round down.
    Anything else, or a size under one byte, is a usage error (exit 2) naming the option.
    """
    if text is None:
        return None
    match = _SIZE.fullmatch(text)
    size = int(Fraction(match.group(1)) * SIZE_UNITS[match.group(2).upper()]) if match else 0
    if size < 1:
        raise click.BadParameter(f"cannot parse size {text!r}: give a positive number and a unit, KB/MB/GB/TB "
                                 "(powers of 10) or KiB/MiB/GiB/TiB (powers of 2), e.g. 2GB, 500MB, 512MiB",
                                 param_hint=option)
    return size
