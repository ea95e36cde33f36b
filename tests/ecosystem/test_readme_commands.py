"""Every ``dltsched`` command in the shell blocks of the README and the documentation names a real subcommand
and real options.

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

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S)


def readme_commands(pages: list[Path] = PAGES) -> list[list[str]]:
    """The argument lists of every ``dltsched ...`` command (continuation lines joined, chains split)."""
    out = []
    for block in (b for page in pages for b in _shell_blocks(page.read_text())):
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


def _subcommands(commands: list[list[str]]) -> set[str]:
    return {next((t for t in c if not t.startswith("-")), "") for c in commands}


def test_the_readme_and_the_docs_have_commands_to_check() -> None:
    assert len(COMMANDS) >= 30
    assert _subcommands(COMMANDS) >= {"solve", "simulate", "bench", "predict", "serve", "profile", "slurm"}
    assert _subcommands(readme_commands([README])) >= {"solve", "simulate", "bench", "serve", "slurm",
                                                       "batch"}


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_readme_command_parses(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*args, "--help"])
    err = capsys.readouterr().err
    assert code == 0, f"dltsched {' '.join(args)}: {err.strip()}"
