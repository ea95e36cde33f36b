"""Terminal output shared by the commands: a console of the right width, tables that fit it, a result written
with ``-o`` (and the one line saying so), and warnings counted per run instead of printed one by one."""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

#: width of tables written to a pipe or a file when ``COLUMNS`` does not say (wide enough for every table)
PIPE_WIDTH = 160


def console(stderr: bool = False) -> Console:
    """A console as wide as the terminal, or ``$COLUMNS``; written to a pipe or a file without ``COLUMNS``,
    :data:`PIPE_WIDTH` columns."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False)
    if not out.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        out = Console(stderr=stderr, highlight=False, width=PIPE_WIDTH)
    return out


def print_fitted(out: Console, make_table: Callable[[], Table], headers: Sequence[str],
                 rows: Sequence[Sequence[str]], *, priority: Sequence[int] | None = None,
                 right: Sequence[int] = ()) -> list[str]:
    """Print ``rows`` under ``headers`` in a table of ``make_table()`` that fits ``out``'s width.

    Columns take their natural width when the table fits; else headers and cells wrap at their spaces
    (never inside a word or a number), the spare width going to the most important columns; when even that
    is too wide, the columns last in ``priority`` (indices, most important first; default: left to right)
    are left out and a line names them. Returns the headers left out."""
    from rich.measure import Measurement

    order = list(priority if priority is not None else range(len(headers)))
    texts = [[headers[i], *(row[i] for row in rows)] for i in range(len(headers))]
    natural = [max(len(t) for t in col) for col in texts]
    minimum = [max(len(word) for t in col for word in (t.split() or [""])) for col in texts]
    keep = sorted(order)

    def build(widths: dict[int, int] | None) -> Table:
        table = make_table()
        for i in keep:
            table.add_column(headers[i], justify="right" if i in right else "left",
                             width=None if widths is None else widths[i])
        for row in rows:
            table.add_row(*(row[i] for i in keep))
        return table

    while True:
        table = build(None)
        overhead = Measurement.get(out, out.options.update_width(10**6),
                                   table).maximum - sum(natural[i] for i in keep)
        room = out.width - overhead
        if sum(natural[i] for i in keep) <= room:
            break
        if sum(minimum[i] for i in keep) <= room or len(keep) == 1:
            widths = {i: minimum[i] for i in keep}
            spare = room - sum(widths.values())
            for i in (i for i in order if i in keep):  # the most important columns unwrap first
                grow = max(0, min(natural[i] - widths[i], spare))
                widths[i] += grow
                spare -= grow
            table = build(widths)
            break
        keep.remove(next(i for i in reversed(order) if i in keep))
    out.print(table)
    dropped = [headers[i] for i in range(len(headers)) if i not in keep]
    if dropped:
        out.print(f"not shown at {out.width} columns: {', '.join(dropped)} (a wider terminal or "
                  "--json shows them)")
    return dropped


def json_text(payload: Any, indent: int | None = 2) -> str:
    """``payload`` as strict JSON text: NaN and infinities become ``null`` (never bare ``NaN``), numpy
    scalars become Python numbers, tuples and sets lists. Every JSON the CLI prints or writes goes through
    here."""
    return json.dumps(_finite(payload), indent=indent, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_finite(v) for v in obj]
    if isinstance(obj, str | int | bool) or obj is None:
        return obj
    if hasattr(obj, "item"):
        return _finite(obj.item())
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def write_output(path: str, payload: Any, as_json: bool, human: Callable[[], None], what: str) -> None:
    """``-o FILE``: write ``payload`` as JSON to ``path``; print for people ``human()`` and one line saying
    what was written, or with ``as_json`` that line as a one-line JSON object (never the whole result)."""
    from dltsched.engine.domain.errors import write_text_file

    write_text_file(path, json_text(payload) + "\n", option="--output")
    rows = payload.get("rows") if isinstance(payload, dict) else payload
    count = len(rows) if isinstance(rows, list) else 1
    size = os.path.getsize(path)
    if as_json:
        click.echo(json_text({"output": path, "bytes": size, "rows": count, "what": what}, indent=None))
        return
    human()
    click.echo(f"wrote {what} ({count} row{'s' if count != 1 else ''}, {_size(size)}) to {path}")


def _size(num_bytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if num_bytes < 1000 or unit == "GB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    return f"{num_bytes:.1f} GB"


class WarningTally(logging.Handler):
    """Counts the warnings logged during a run by their message template (``record.msg``), keeping the first
    rendered message of each as an example."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()
        self.example: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Count a warning by its message template and keep its first rendered text as the example.

        Parameters
        ----------
        record
            The warning's log record.
        """
        key = str(record.msg)
        self.counts[key] += 1
        self.example.setdefault(key, record.getMessage())

    def lines(self) -> list[str]:
        """One line per kind of warning: its count and its first message."""
        return [f"warning: {self.example[key]}" + (f" (and {n - 1} more like it)" if n > 1 else "")
                for key, n in self.counts.most_common()]


@contextmanager
def tallied_warnings(enabled: bool = True) -> Iterator[WarningTally]:
    """Within the block, warnings logged by dltsched are counted instead of printed one by one (unless
    ``enabled`` is false, e.g. under ``-v``); at its end one line goes to stderr with the counts."""
    tally = WarningTally()
    if not enabled:
        yield tally
        return
    root = logging.getLogger()
    package = logging.getLogger("dltsched")
    quiet_filter = _DropWarnings()
    for handler in root.handlers:
        handler.addFilter(quiet_filter)
    package.addHandler(tally)
    try:
        yield tally
    finally:
        package.removeHandler(tally)
        for handler in root.handlers:
            handler.removeFilter(quiet_filter)
        lines = tally.lines()
        if lines:
            click.echo("; ".join(lines) + " (-v shows each)" if len(lines) == 1 else
                       f"warning: {sum(tally.counts.values())} warnings of {len(lines)} kinds "
                       "(-v shows each): "
                       + " | ".join(line.removeprefix("warning: ") for line in lines), err=True)


class _DropWarnings(logging.Filter):
    """Lets through everything but dltsched's warnings (the tally counts those)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and record.name.startswith("dltsched"))
