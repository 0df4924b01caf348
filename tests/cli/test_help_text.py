"""--help in a pipe at 80 columns loses no text: the command list shows each first sentence whole, and each
command's help has every word of its doc and its options."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, env=ENV,
                          timeout=600, **kwargs)


def words(text: str) -> str:
    """Whitespace-normalised, with click's hyphen line breaks ('error-' / 'severity') joined back."""
    return " ".join(re.sub(r"-\n\s+", "-", text.replace("\b", " ")).split())


def first_sentence(help_text: str) -> str:
    paragraph = words(help_text.split("\n\n")[0])
    match = re.match(r"(.*?\.)(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def commands() -> dict[str, click.Command]:
    from eagleconv.cli.main import cli as group

    return dict(group.commands)


def test_the_command_list_shows_each_first_sentence_whole():
    """click cut them at about 60 columns with '...' ('validate  Check drafter checkpoint PATH (a directory or...')."""
    listing = words(cli("--help").stdout.split("Commands:")[1])
    for name, command in commands().items():
        assert f"{name} {first_sentence(command.help or '')}" in listing, name


@pytest.mark.parametrize("name", sorted(commands()))
def test_each_commands_help_has_every_word_of_its_doc_and_options(name):
    result = cli(name, "--help")
    assert result.returncode == 0, result.stderr
    shown = words(result.stdout)
    command = commands()[name]
    assert words(command.help or "") in shown
    for param in command.params:
        if isinstance(param, click.Option) and param.help:
            assert words(param.help) in shown, (name, param.name)
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
