"""Readers that turn real workloads into instances, and the one registry that names them.

``read_workload(name, ...)`` with names: ``philly``; ``gavel`` (all virtual clusters) or
``gavel:<vc>``; ``muri:trace1``..``muri:trace4``, ``muri:job_type_1``..``4``, ``muri:cluster``;
``sia:saturn/<file>``, ``sia:philly/<file>``, ``pollux:<file>``; ``alibaba2023`` (also
``alibaba2023:gpuspec33``). See :mod:`.common` for windowing, clusters and the model rule.
"""

from __future__ import annotations

import os

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Cluster, Instance
from dltsched.instances.readers.common import Window


def workload_names(data_dir: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """Every workload name ``read_workload`` accepts (needs the data folder).

    Parameters
    ----------
    data_dir
        The data folder (default: found automatically).

    Returns
    -------
    tuple of str
        The names.
    """
    from dltsched.instances.readers.traces import MURI_FILES, gavel_vcs, pollux_workload_files

    return (
        "philly",
        "gavel",
        *(f"gavel:{v}" for v in gavel_vcs(data_dir)),
        *(f"muri:{t}" for t in MURI_FILES),
        *pollux_workload_files(data_dir),
        "alibaba2023",
        "alibaba2023:gpuspec33",
    )


def read_workload(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cluster: Cluster | str | None = None,
    max_jobs: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    seed: int = 0,
) -> Instance:
    """A real workload as an :class:`Instance`: window ``[start_s, end_s)`` of trace time, then the
    first ``max_jobs`` jobs, arrivals re-based to 0; ``seed`` drives model assignment where the
    trace has no model names.

    Parameters
    ----------
    name
        The workload (one of :func:`workload_names`).
    data_dir
        The data folder (default: found automatically).
    cluster
        The cluster, or its spec (default: the trace's own, else one sized for it).
    max_jobs
        Keep at most this many jobs of the window.
    start_s, end_s
        The window of trace time.
    seed
        Drives model assignment where the trace names no models.

    Returns
    -------
    Instance
        The instance; metadata records the window and the conversion.

    Raises
    ------
    ValidationError
        When ``name`` is not a workload, or (from the readers) the window or cluster does not work.
    """
    from dltsched.instances.readers import alibaba, philly, traces

    window = Window(start_s, end_s, max_jobs)
    family, _, rest = name.partition(":")
    if family == "philly" and not rest:
        return philly.read_philly(data_dir=data_dir, cluster=cluster, window=window, seed=seed)
    if family == "gavel":
        return traces.read_gavel(rest or None, data_dir=data_dir, cluster=cluster, window=window)
    if family == "muri" and rest:
        return traces.read_muri(rest, data_dir=data_dir, cluster=cluster, window=window)
    if family in ("sia", "pollux") and rest:
        return traces.read_pollux_workload(name, data_dir=data_dir, cluster=cluster, window=window)
    if family == "alibaba2023" and rest in ("", "default", "gpuspec33"):
        return alibaba.read_alibaba(
            rest or "default", data_dir=data_dir, cluster=cluster, window=window, seed=seed
        )
    raise ValidationError(
        "workload",
        f"'{name}' not understood; one of philly, gavel, gavel:<vc>, muri:trace1, "
        "sia:saturn/<file>, pollux:<file>, alibaba2023 (list: dltsched instance workloads)",
    )


__all__ = ["read_workload", "workload_names"]
