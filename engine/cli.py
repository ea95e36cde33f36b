"""The ``dltsched`` command line.

Subcommands live beside the code they drive and are imported only when used, so ``dltsched
simulate`` never pays for torch. Every command takes ``--json`` for machine use; bad input prints
one line ``error: <field>: <problem>`` on stderr and exits with code 2.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from typing import Any

import click

from dltsched.engine.errors import DltschedError

#: command name -> "module:attribute" of a click command or group
_COMMANDS: dict[str, str] = {
    "instance": "dltsched.instances.cli:instance",
    "simulate": "dltsched.engine.cli_simulate:simulate",
    "solve": "dltsched.formulations.cli:solve",
    "predict": "dltsched.predictors.cli:predict",
    "profile": "dltsched.predictors.cli:profile",
    "bench": "dltsched.engine.cli_bench:bench",
    "serve": "dltsched.engine.service:serve",
    "batch": "dltsched.engine.batch:batch",
    "plot": "dltsched.engine.plots:plot",
    "experiment": "dltsched.engine.experiments:experiment",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, _, attr = self.lazy[cmd_name].partition(":")
            try:
                return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
            except (ImportError, AttributeError) as err:
                raise click.UsageError(f"command '{cmd_name}' is not available here: {err}") from None
        return super().get_command(ctx, cmd_name)


def emit(payload: Any, as_json: bool, human: Any = None) -> None:
    """Print ``payload`` as JSON, or call ``human()`` (or print it) for people."""
    if as_json:
        click.echo(json.dumps(payload, indent=2, default=_json_default))
    elif human is not None:
        human()
    else:
        click.echo(payload)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


@click.group(cls=LazyGroup, lazy=_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress bars.")
@click.version_option(package_name="dltsched")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """dltsched: optimization-based scheduling of deep-learning training jobs on GPU clusters."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    ctx.ensure_object(dict)
    ctx.obj["quiet"] = quiet


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the CLI and turns dltsched errors into one line and exit code 2."""
    try:
        code = cli.main(args=argv, prog_name="dltsched", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code or 0)
    except click.ClickException as exc:
        exc.show()
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    except (DltschedError, ValueError, FileNotFoundError, json.JSONDecodeError) as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
