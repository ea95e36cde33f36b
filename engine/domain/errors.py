"""Typed errors users can act on. Every message names the offending field and what is allowed."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path


class DltschedError(Exception):
    """Base class of every error raised on purpose by dltsched."""


class ValidationError(DltschedError, ValueError):
    """Input that does not describe a valid instance, job, cluster, state or plan.

    ``path`` is the field path (``jobs[3].num_gpus``); ``str(err)`` is one line:
    ``"jobs[3].num_gpus: 0 not understood; must be >= 1"``.

    Parameters
    ----------
    path
        The field path (empty: the input as a whole).
    problem
        What is wrong and what is allowed.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)

    def under(self, prefix: str) -> ValidationError:
        """The same error with ``prefix`` prepended to its path.

        Parameters
        ----------
        prefix
            The path of the enclosing field, e.g. ``jobs[3]``.

        Returns
        -------
        ValidationError
            The error at ``prefix.path``.
        """
        dotted = self.path and not self.path.startswith("[")
        path = f"{prefix}.{self.path}" if dotted else f"{prefix}{self.path}"
        return ValidationError(path, self.problem)


def check_positive(path: str, value: float, *, integer: bool = False) -> None:
    """Check that ``value`` is a finite number > 0 (an integer >= 1 with ``integer``).

    Parameters
    ----------
    path
        The field path errors carry.
    value
        The value.
    integer
        Require an integer.

    Raises
    ------
    ValidationError
        At ``path`` when it is not.
    """
    if integer and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValidationError(path, f"{value!r} not understood; must be an integer >= 1")
    if (not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value)
            or value <= 0):
        raise ValidationError(path, f"{value!r} not understood; must be {'>= 1' if integer else '> 0'}")


def check_non_negative(path: str, value: float) -> None:
    """Check that ``value`` is a finite number >= 0.

    Parameters
    ----------
    path
        The field path errors carry.
    value
        The value.

    Raises
    ------
    ValidationError
        At ``path`` when it is not.
    """
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValidationError(path, f"{value!r} not understood; must be a finite number >= 0")


class InvalidPlanError(DltschedError, ValueError):
    """A plan that breaks capacity, memory, gang or placement rules of the cluster state."""


class SimulationStalledError(DltschedError, RuntimeError):
    """A simulation that cannot finish: its event loop stopped making progress, or its simulated time would
    pass the configured bound. The message names the policy and the run's state (clock, queue, running)."""


class InfeasibleRoundError(DltschedError):
    """A round with jobs that can never be placed; ``jobs`` names them.

    Parameters
    ----------
    message
        The message.
    jobs
        The ids of the jobs that can never be placed.
    """

    def __init__(self, message: str, jobs: tuple[str, ...] = ()) -> None:
        self.jobs = jobs
        super().__init__(message)


class DataNotFoundError(DltschedError, FileNotFoundError):
    """The shared data folder (or a file in it) is missing; says how to point at it."""


def write_problem(path: Path, err: OSError) -> str:
    """Why ``path`` cannot be written, in words: names a parent that is a regular file.

    Parameters
    ----------
    path
        The file that could not be written.
    err
        The error writing it gave.

    Returns
    -------
    str
        The reason.
    """
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"'{parent}' is a file, not a folder"
            return err.strerror or str(err)
    return err.strerror or str(err)


def write_text_file(path: str | os.PathLike[str], text: str, *, option: str = "--output") -> Path:
    """Write ``text`` to ``path`` (parent folders are created).

    Parameters
    ----------
    path
        The file.
    text
        The text.
    option
        The option or field that named the file, for the message.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    ValidationError
        Naming ``option`` and the reason when the path cannot be written (never a raw OSError).
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    except OSError as err:
        raise ValidationError(option, f"cannot write '{path}': {write_problem(p, err)}; give a writable "
                              "file path") from None
    return p


def write_atomically(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with ``data`` so that a reader, or a crash at any instant, sees the old file or the
    new one whole: written to a temporary file beside it (``.NAME.*.tmp``), flushed to disk, renamed over
    it, and the folder synced (parent folders are created; the temporary file never outlives a failure).

    Parameters
    ----------
    path
        The file.
    data
        Its new contents.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    OSError
        When the folder or the file cannot be written (callers turn it into their own one-line error).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return target


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory handles: the rename is as durable as it gets
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
