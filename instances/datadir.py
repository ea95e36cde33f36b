"""Locating the shared data folder of real measurements and traces.

Order: an explicit path, then the ``DLTSCHED_DATA`` environment variable, then a ``shared/data``
folder beside the current directory or any of its parents (the layout of a checkout with
``../shared`` next to it). Never a fixed machine path.
"""

from __future__ import annotations

import os
from pathlib import Path

from dltsched.engine.domain.errors import DataNotFoundError

ENV_VAR = "DLTSCHED_DATA"


def _candidates() -> list[Path]:
    out: list[Path] = []
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for parent in (start, *start.parents):
            out.append(parent / "shared" / "data")
    return out


def find_data_dir(path: str | os.PathLike[str] | None = None, *, required: bool = True) -> Path | None:
    """The data folder: ``path``, else ``$DLTSCHED_DATA``, else a ``shared/data`` above the working directory
    or the package.

    Parameters
    ----------
    path
        A folder given explicitly.
    required
        Raise when none is found (else return ``None``).

    Returns
    -------
    Path or None
        The folder; ``None`` when ``required`` is false and none is found.

    Raises
    ------
    DataNotFoundError
        When a given folder (or ``$DLTSCHED_DATA``) is not a folder, or none is found and ``required``.
    """
    if path is not None:
        p = Path(path)
        if not p.is_dir():
            raise DataNotFoundError(f"data folder '{p}' does not exist; pass an existing folder "
                                    f"or set {ENV_VAR}")
        return p
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env)
        if not p.is_dir():
            raise DataNotFoundError(f"{ENV_VAR}='{env}' is not a folder; point it at the shared data folder")
        return p
    for cand in _candidates():
        if (cand / "README.md").is_file() or (cand / "gavel").is_dir():
            return cand
    if required:
        raise DataNotFoundError(
            f"shared data folder not found; set {ENV_VAR}=/path/to/shared/data or pass --data-dir"
        )
    return None


def data_file(*parts: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """A file (or folder) inside the data folder; a clear error when it is missing or not a regular file.

    Parameters
    ----------
    *parts
        The path inside the folder.
    data_dir
        The data folder (default: :func:`find_data_dir`).

    Returns
    -------
    Path
        The file.

    Raises
    ------
    DataNotFoundError
        When the folder or the file is missing.
    ValidationError
        When it is a device or a pipe, or a file larger than the ``max_data_file_mib`` cap.
    """
    base = find_data_dir(data_dir)
    assert base is not None
    p = base.joinpath(*parts)
    if not p.exists():
        raise DataNotFoundError(f"'{p}' not found in the data folder '{base}'")
    if p.is_dir():
        return p
    from dltsched.engine.domain.limits import check_regular_file

    return check_regular_file(p, "data file", cap="max_data_file_mib")
