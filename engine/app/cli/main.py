"""The ``dltsched`` command line.

Subcommands live beside the code they drive and are imported only when used, so ``dltsched
simulate`` never pays for torch. Every command takes ``--json`` for machine use; bad input prints
one line ``error: <field>: <problem>`` on stderr and exits with code 2.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import sys
from typing import Any

import click

from dltsched.engine.app.cli.output import json_text as json_text  # every JSON the CLI writes
from dltsched.engine.domain.errors import DltschedError

log = logging.getLogger(__name__)

#: command name -> "module:attribute" of a click command or group
_COMMANDS: dict[str, str] = {
    "instance": "dltsched.engine.app.cli.instance:instance",
    "simulate": "dltsched.engine.app.cli.simulate:simulate",
    "solve": "dltsched.engine.app.cli.solve:solve",
    "predict": "dltsched.engine.app.cli.predict:predict",
    "profile": "dltsched.engine.app.cli.predict:profile",
    "calibrate": "dltsched.engine.app.cli.calibrate:calibrate",
    "bench": "dltsched.engine.app.cli.bench:bench",
    "serve": "dltsched.engine.app.service.server:serve",
    "batch": "dltsched.engine.app.batch:batch",
    "plot": "dltsched.engine.app.plots:plot",
    "slurm": "dltsched.engine.app.adapters.slurm:slurm",
    "experiment": "dltsched.engine.app.experiments:experiment",
}

#: the one-line help ``dltsched --help`` lists, so that listing the commands imports none of them
_COMMAND_HELP: dict[str, str] = {
    "instance": "Instance files: validate, show, convert real workloads, generate synthetic ones.",
    "simulate": "Simulate policies on an instance and compare their metrics.",
    "solve": "Solve one round (ROUND_OR_INSTANCE.json) and print the checked plan.",
    "predict": "Step-time, freezing and co-location predictions, calibration and evaluation.",
    "profile": "Run real training steps of zoo models alone or co-located.",
    "calibrate": "Fit a calibration bundle for a GPU from 'dltsched profile' datasets (CPU).",
    "bench": "Benchmarks: simulation, solver and predictor speed.",
    "serve": "Serve POST /v1/schedule over HTTP (OpenAPI docs at /docs).",
    "batch": "Solve or simulate every instance in DIR|GLOB x policies x seeds, in parallel.",
    "plot": "Render the standard figures of a simulate / accuracy / bench-solve result.",
    "slurm": "Scheduling daemon for a Slurm cluster: plan held jobs each round and release them.",
    "experiment": "Run or show an experiment file (EXP.toml): workload, policies, seeds, outputs.",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None,
                 lazy_help: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.lazy_help = dict(lazy_help or {})  # short help of lazy commands: listed without importing them

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, those imported lazily included, sorted."""
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command called ``cmd_name`` (``None`` if unknown), importing its module on first use.

        Raises
        ------
        UsageError
            When the command's module cannot be imported here (an optional dependency is missing).
        """
        if cmd_name in self.lazy:
            module, _, attr = self.lazy[cmd_name].partition(":")
            try:
                return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
            except (ImportError, AttributeError) as err:
                raise click.UsageError(f"command '{cmd_name}' is not available here: {err}") from None
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list; lazy commands with a ``lazy_help`` line are listed without importing them."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy_help:
                rows.append((name, self.lazy_help[name]))
            elif (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden:
                widest = max(len(n) for n in self.list_commands(ctx))
                rows.append((name, cmd.get_short_help_str(formatter.width - 6 - widest)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def emit(payload: Any, as_json: bool, human: Any = None) -> None:
    """Print ``payload`` as JSON, or call ``human()`` (or print it) for people."""
    if as_json:
        click.echo(json_text(payload))
    elif human is not None:
        human()
    else:
        click.echo(payload)


class FiniteFloat(click.ParamType):
    """A float option that must be finite and within ``[min, max]`` (``min_open``: strictly above ``min``).
    click's FloatRange lets ``nan`` through; this does not."""

    name = "float"

    def __init__(self, min: float | None = None, max: float | None = None, *, min_open: bool = False) -> None:
        self.min, self.max, self.min_open = min, max, min_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """Click's conversion: the value as a finite float; anything else fails with a one-line usage
        error."""
        if isinstance(value, float) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        low_ok = self.min is None or (number > self.min if self.min_open else number >= self.min)
        if not low_ok or (self.max is not None and number > self.max):
            self.fail(f"{value!r} is not in the range {self._range()}", param, ctx)
        return number

    def _range(self) -> str:
        low = "" if self.min is None else f"{self.min:g}{'<' if self.min_open else '<='}"
        high = "" if self.max is None else f"<={self.max:g}"
        return f"{low}x{high}"

    def __repr__(self) -> str:
        return f"FiniteFloat({self._range()})"


class BackendName(click.ParamType):
    """A backend name of the one vocabulary (:mod:`dltsched.engine.app.vocabulary`), in its canonical form;
    a name not understood is a usage error with the close matches."""

    name = "backend"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Click's conversion: the value as a canonical backend name; an unknown one fails with a one-line
        usage error."""
        from dltsched.engine.app.vocabulary import parse_backend

        try:
            return str(parse_backend(value))
        except DltschedError as err:
            self.fail(getattr(err, "problem", str(err)), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        """The backend names of the registry, as ``--help`` shows them."""
        from dltsched.engine.app.vocabulary import backend_names

        return f"[{'|'.join(backend_names())}]"


@click.group(cls=LazyGroup, lazy=_COMMANDS, lazy_help=_COMMAND_HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
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
    ctx.obj["verbose"] = verbose
    if not quiet and not verbose:  # warnings counted, one line at the end of the run; -v prints each
        from dltsched.engine.app.cli.output import tallied_warnings

        ctx.with_resource(tallied_warnings())


def _one_line(text: str, limit: int = 500) -> str:
    """``text`` on one line (control characters shown escaped), cut to ``limit`` characters."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(str(text).split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _usage_line(exc: click.ClickException) -> str:
    """A click usage error as one line, with the command's help hint."""
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"error: {_one_line(exc.format_message())}{hint}"


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the CLI; every failure is one line on stderr. Bad input (dltsched errors, usage
    errors, unreadable or unwritable files, input nested too deeply, too large for memory) exits 2; an
    unexpected internal error exits 1, also as one line (``-vv`` logs its traceback)."""
    try:
        args = list(sys.argv[1:] if argv is None else argv)
        code = cli.main(args=args, prog_name="dltsched", standalone_mode=False, obj={"argv": args})
    except click.exceptions.Exit as exc:
        return int(exc.exit_code or 0)
    except click.ClickException as exc:
        click.echo(_usage_line(exc), err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    except (DltschedError, ValueError, json.JSONDecodeError) as exc:
        click.echo(f"error: {_one_line(str(exc))}", err=True)
        return 2
    except RecursionError:
        click.echo("error: input nested too deeply to read; flatten it", err=True)
        return 2
    except MemoryError:
        click.echo("error: input too large for memory; give a smaller instance or cluster", err=True)
        return 2
    except OSError as exc:
        if exc.filename is None:
            click.echo(f"error: {_one_line(str(exc))}", err=True)
        else:
            click.echo(f"error: cannot access '{exc.filename}': {_one_line(exc.strerror or str(exc))}",
                       err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: one line, never a traceback
        log.debug("internal error", exc_info=True)
        click.echo(f"error: internal error ({type(exc).__name__}: {_one_line(str(exc), 300)}); "
                   "please report it with the command (-vv logs the traceback)", err=True)
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
