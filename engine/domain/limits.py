"""The resource budget: every cap on what one command or request may read, run or remember, in one place.

Each cap has a default and an environment variable that overrides it (``DLTSCHED_MAX_INPUT_MIB=512``); the
error a cap raises names the cap, its value and the variable, so a user who needs more knows what to set.
``docs/limits.md`` lists them all. :func:`read_limited` is the one way a user-named file is read: streamed
in chunks up to the cap, so a device (``/dev/urandom``, ``/dev/zero``), a huge file or a pipe cannot make
a command read without end, and a named pipe that has no writer is an error at once, not a wait.
"""

from __future__ import annotations

import codecs
import math
import os
import select
import stat
from dataclasses import dataclass
from pathlib import Path

from dltsched.engine.domain.errors import ValidationError

_MIB = 1024 * 1024
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Limit:
    """One cap on what a command or request may read, run or remember.

    Parameters
    ----------
    name
        The cap as messages name it, e.g. ``max_input_mib``.
    env
        The environment variable that overrides the default.
    default
        The value when the variable is not set.
    unit
        The unit of the value (``MiB``, ``s``, ``seeds``).
    what
        What the cap bounds, for the documentation.
    """

    name: str
    env: str
    default: float
    unit: str
    what: str

    def value(self) -> float:
        """The cap now: the environment variable when set (a finite number > 0), else the default.

        Returns
        -------
        float
            The value, in the cap's unit.

        Raises
        ------
        ValidationError
            Naming the variable when it is set to something else.
        """
        text = os.environ.get(self.env)
        if text is None or not text.strip():
            return self.default
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= 0:
            raise ValidationError(self.env, f"{text[:40]!r} not understood; a number > 0 ({self.unit})")
        return number

    def hint(self) -> str:
        """How to raise the cap, for messages.

        Returns
        -------
        str
            E.g. ``max_seeds is 10000 seeds; set DLTSCHED_MAX_SEEDS to change it``.
        """
        return f"{self.name} is {self.value():g} {self.unit}; set {self.env} to change it"


#: every cap, by name (docs/limits.md is the user's list of them)
LIMITS: dict[str, Limit] = {limit.name: limit for limit in (
    Limit("max_input_mib", "DLTSCHED_MAX_INPUT_MIB", 256.0, "MiB",
          "size of an input file: instance, round, result, experiment, co-location model"),
    Limit("max_data_file_mib", "DLTSCHED_MAX_DATA_FILE_MIB", 4096.0, "MiB",
          "size of a file of the data folder (traces, measurements), read line by line"),
    Limit("max_checkpoint_mib", "DLTSCHED_MAX_CHECKPOINT_MIB", 2048.0, "MiB",
          "size of a simulation checkpoint"),
    Limit("max_pipe_wait_s", "DLTSCHED_MAX_PIPE_WAIT_S", 10.0, "s",
          "wait for the first bytes from a pipe whose writer is slow to start"),
    Limit("max_seeds", "DLTSCHED_MAX_SEEDS", 10_000.0, "seeds", "seeds in one batch --seeds sweep"),
    Limit("max_batch_items", "DLTSCHED_MAX_BATCH_ITEMS", 1_000_000.0, "items",
          "runs in one batch (files x policies x seeds)"),
    Limit("max_sim_wall_s", "DLTSCHED_MAX_SIM_WALL_S", 6 * 3600.0, "s", "wall-clock time of one simulation"),
)}


def limit(name: str) -> float:
    """The current value of the cap ``name`` (see :data:`LIMITS`).

    Parameters
    ----------
    name
        The cap, e.g. ``"max_input_mib"``.

    Returns
    -------
    float
        Its value, in its unit.
    """
    return LIMITS[name].value()


def _over(where: str, size: str, cap: Limit) -> ValidationError:
    return ValidationError(where, f"larger than {size}; {cap.hint()}")


def read_limited(path: str | os.PathLike[str], where: str | None = None, *, cap: str = "max_input_mib",
                 text: bool = True) -> bytes:
    """The bytes of ``path``, read in chunks up to the cap ``cap`` (MiB).

    A regular file larger than the cap is refused before it is read; a device or a pipe is read until the
    cap. With ``text``, bytes that cannot be UTF-8 text (a bad sequence, a NUL byte) stop the read at once.
    A named pipe that no process writes to is an error at once (it reads as empty), and one whose writer
    sends nothing for ``max_pipe_wait_s`` seconds too.

    Parameters
    ----------
    path
        The file.
    where
        What messages call the file (default: its path).
    cap
        The size cap in :data:`LIMITS` (in MiB).
    text
        Refuse bytes that are not UTF-8 text as soon as they arrive.

    Returns
    -------
    bytes
        The content.

    Raises
    ------
    ValidationError
        Naming ``where`` (and the cap) for a file over the cap, a folder, binary data or a silent pipe.
    FileNotFoundError, PermissionError
        When the file is missing or unreadable (the callers' messages say which file).
    """
    where = str(path) if where is None else where
    limit_ = LIMITS[cap]
    max_bytes = int(limit_.value() * _MIB)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ValidationError(where, "is a folder; pass a file")
        regular = stat.S_ISREG(info.st_mode)
        if regular and info.st_size > max_bytes:
            raise _over(where, f"{max_bytes // _MIB} MiB ({info.st_size} bytes)", limit_)
        if regular:
            os.set_blocking(fd, True)
        return _read_chunks(fd, where, max_bytes, limit_, text, stat.S_ISFIFO(info.st_mode))
    finally:
        os.close(fd)


def _read_chunks(fd: int, where: str, max_bytes: int, limit_: Limit, text: bool, pipe: bool) -> bytes:
    decoder = codecs.getincrementaldecoder("utf-8")() if text else None
    chunks: list[bytes] = []
    size = 0
    wait_s = limit("max_pipe_wait_s")
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:  # a pipe or device with a writer that has sent nothing yet
            ready, _, _ = select.select([fd], [], [], wait_s)
            if not ready:
                raise ValidationError(where, f"nothing to read for {wait_s:g} s (a pipe with a silent "
                                      f"writer?); max_pipe_wait_s is {wait_s:g} s, set "
                                      "DLTSCHED_MAX_PIPE_WAIT_S to change it") from None
            continue
        if not chunk:
            break
        if decoder is not None:
            nul = chunk.find(b"\x00")
            if nul >= 0:
                raise ValidationError(where, f"binary data (a NUL byte at byte {size + nul}); pass a text "
                                      "file")
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                raise ValidationError(where, f"not UTF-8 text (byte {size + err.start}); pass a text "
                                      "file") from None
        size += len(chunk)
        if size > max_bytes:
            raise _over(where, f"{max_bytes // _MIB} MiB", limit_)
        chunks.append(chunk)
    if decoder is not None:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ValidationError(where, f"not UTF-8 text (it ends inside a character at byte {size}); "
                                  "pass a text file") from None
    if pipe and size == 0:
        raise ValidationError(where, "is a pipe with nothing written to it; pass a file, or start its "
                              "writer first")
    return b"".join(chunks)


def check_regular_file(path: str | os.PathLike[str], where: str, *, cap: str = "max_input_mib") -> Path:
    """``path`` as a :class:`Path`, when it is a regular file within the cap ``cap`` (files that are read
    line by line, such as traces, are checked here before they are opened); a missing path passes (the
    reader says it is missing).

    Parameters
    ----------
    path
        The file.
    where
        What messages call it.
    cap
        The size cap in :data:`LIMITS` (in MiB).

    Returns
    -------
    Path
        The path.

    Raises
    ------
    ValidationError
        For a folder, a device, a pipe or a file over the cap.
    """
    p = Path(path)
    try:
        info = p.stat()
    except OSError:
        return p
    if stat.S_ISDIR(info.st_mode):
        raise ValidationError(where, f"'{p}' is a folder; pass a file")
    if not stat.S_ISREG(info.st_mode):
        raise ValidationError(where, f"'{p}' is not a regular file (a device or a pipe); pass a file")
    limit_ = LIMITS[cap]
    if info.st_size > limit_.value() * _MIB:
        raise _over(where, f"{limit_.value():g} MiB ({info.st_size} bytes)", limit_)
    return p
