"""Every ``dltsched`` command in the README's shell blocks names a real subcommand and real options.

Each command is parsed by the CLI itself with ``--help`` appended: click parses every token before it
prints help, so a renamed subcommand or option fails here (exit 2) instead of in a reader's terminal.
Values are not run (that is what the other ecosystem tests do for the main flows).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dltsched.engine.app.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S)


def readme_commands() -> list[list[str]]:
    """The argument lists of every ``dltsched ...`` command (continuation lines joined, chains split)."""
    out = []
    for block in _shell_blocks(README.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            tokens = shlex.split(line, comments=True)
            command: list[str] = []
            for token in [*tokens, ";"]:
                if token in (";", "&&", "||", "|"):
                    if command[:1] == ["dltsched"]:
                        out.append(command[1:])
                    command = []
                else:
                    command.append(token)
    return out


COMMANDS = readme_commands()


def test_the_readme_has_commands_to_check() -> None:
    assert len(COMMANDS) >= 30
    assert {c[0] for c in COMMANDS} >= {"solve", "simulate", "bench", "predict", "serve", "profile"}


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_readme_command_parses(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*args, "--help"])
    err = capsys.readouterr().err
    assert code == 0, f"dltsched {' '.join(args)}: {err.strip()}"
