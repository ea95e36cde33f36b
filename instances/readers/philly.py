"""Microsoft Philly trace (``pollux/philly.csv``: timestamp, duration, num_gpus, gpu_time, cluster).

82,247 jobs, 2017-09-04 .. 2017-12-22; arrival = seconds since the earliest timestamp of the file.
The trace has no model names: models follow the seeded uniform Gavel rule of
:mod:`dltsched.instances.readers.common`; durations become iterations on the reference GPU.
"""

from __future__ import annotations

import csv
import os
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from dltsched.engine.domain.model import Cluster, Instance
from dltsched.instances.datadir import data_file
from dltsched.instances.readers.common import TraceJob, Window, assign_gavel_models, build_instance

PHILLY_FILE = ("pollux", "philly.csv")


def read_philly_rows(
    data_dir: str | os.PathLike[str] | None = None, *, seed: int = 0
) -> tuple[TraceJob, ...]:
    """Every row of the Philly trace, in file order, with models assigned by ``seed`` (cached).

    Parameters
    ----------
    data_dir
        The data folder (default: found automatically).
    seed
        Drives model assignment (the trace names no models).

    Returns
    -------
    tuple of TraceJob
        The rows.
    """
    return philly_rows(str(data_file(*PHILLY_FILE, data_dir=data_dir).resolve()), seed)


@lru_cache(maxsize=2)
def philly_rows(path_name: str, seed: int) -> tuple[TraceJob, ...]:
    """The rows of the Philly trace file ``path_name`` (cached per path and seed; see
    :func:`read_philly_rows`).

    Parameters
    ----------
    path_name
        The trace file.
    seed
        Drives model assignment.

    Returns
    -------
    tuple of TraceJob
        The rows.
    """
    with Path(path_name).open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = [r for r in reader if r]
    col = {name: header.index(name) for name in ("timestamp", "duration", "num_gpus", "cluster")}
    moments = [datetime.fromisoformat(r[col["timestamp"]]) for r in rows]
    origin = min(moments)
    stamps = [(m - origin).total_seconds() for m in moments]
    models = assign_gavel_models(len(rows), seed)
    return tuple(
        TraceJob(
            f"philly-{i}",
            stamp,
            int(r[col["num_gpus"]]),
            model,
            batch,
            dataset,
            duration_s=float(r[col["duration"]]),
            hyperparameters=(("philly_vc", r[col["cluster"]]),),
        )
        for i, (r, stamp, (model, batch, dataset)) in enumerate(zip(rows, stamps, models, strict=True))
    )


def read_philly(
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cluster: Cluster | str | None = None,
    window: Window | None = None,
    seed: int = 0,
) -> Instance:
    """The Philly trace (or a window of it) as an :class:`Instance`.

    Parameters
    ----------
    data_dir, cluster, window
        As for :func:`~dltsched.instances.readers.traces.read_gavel`.
    seed
        Drives model assignment (the trace names no models).

    Returns
    -------
    Instance
        The instance.
    """
    rows = read_philly_rows(data_dir, seed=seed)
    meta = {
        "source": "pollux/philly.csv (Microsoft Philly, via Pollux OSDI'21 artifact)",
        "num_rows_read": len(rows),
        "model_rule": "uniform over Gavel's 26 job types, numpy default_rng(seed), in file order",
        "seed": seed,
    }
    return build_instance(
        "philly", rows, window=window or Window(), cluster=cluster, data_dir=data_dir, metadata=meta
    )
