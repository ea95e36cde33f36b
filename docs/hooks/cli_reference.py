"""MkDocs hook: the command-line reference lists every subcommand, lazy ones included.

mkdocs-click lists a group's ``commands`` dict when it is not empty and asks ``list_commands`` only otherwise;
the CLI's groups import most subcommands on first use (``LazyGroup``), so a group with one eager command would
hide its lazy ones. This hook makes mkdocs-click ask ``list_commands`` / ``get_command`` for every group, and
shows an option without a default (click 8.3 marks it with an ``UNSET`` sentinel) as having none.
"""

from __future__ import annotations

import copy
from typing import Any

import click


def sub_commands(command: click.Command, ctx: click.Context) -> list[click.Command]:
    if not isinstance(command, click.Group):
        return []
    found = (command.get_command(ctx, name) for name in command.list_commands(ctx))
    return [c for c in found if c is not None and not c.hidden]


def without_unset_default(option: click.Option) -> click.Option:
    """``option`` itself, or a copy whose default is ``None`` when click marks it unset."""
    if "UNSET" not in repr(option.default):
        return option
    plain = copy.copy(option)
    plain.default = None
    return plain


def on_config(config: Any) -> Any:
    from mkdocs_click import _docs

    _docs._get_sub_commands = sub_commands  # type: ignore[assignment]
    if not getattr(_docs, "_dltsched_rows", False):
        row = _docs._format_table_option_row
        _docs._format_table_option_row = lambda option: row(without_unset_default(option))  # type: ignore[assignment]
        _docs._dltsched_rows = True  # type: ignore[attr-defined]
    return config
