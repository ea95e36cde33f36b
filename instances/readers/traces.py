"""Readers of traces that name their models: Gavel's Philly-derived traces, Muri, Sia and Pollux workloads.

- **Gavel** ``gavel/traces_msr_seed0/<vc>.trace`` (tab-separated: job type, command, step flag,
  needs-data flag, total steps, arrival s, scale factor): job type -> model/batch via
  :func:`~dltsched.instances.readers.gavel_throughputs.parse_job_type`; ``total_iterations`` = total
  steps; ``gavel`` merges all 15 virtual clusters (each starts at 0) by arrival.
- **Muri** ``muri/simulator_trace-data/<trace>.csv`` and ``muri/cluster_exp_trace-data/cluster_trace.csv``
  (times in ms): ``total_iterations`` = iterations, ``duration_hint_s`` = duration.
- **Sia / Pollux** workloads (``name,time,application,num_replicas,batch_size``) give no duration. Work
  rule: ``total_iterations = max_epochs x dataset_samples / batch_size`` with Pollux's ``max_epochs``
  per application (adaptdl ``simulator/applications.py``) and the public training-set sizes in
  :data:`POLLUX_APPLICATIONS` (DeepSpeech2's CMU-ARCTIC size is approximate). ``batch_size`` in the
  trace is the global batch; a job's ``batch_size`` is per GPU (``ceil(global / replicas)``), the global
  one is kept in ``hyperparameters``.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Cluster, Instance
from dltsched.instances.datadir import data_file
from dltsched.instances.readers.common import TraceJob, Window, build_instance
from dltsched.instances.readers.gavel_throughputs import parse_job_type

GAVEL_TRACE_DIR = ("gavel", "traces_msr_seed0")
MURI_FILES: dict[str, tuple[str, ...]] = {
    **{f"trace{k}": ("muri", "simulator_trace-data", f"trace{k}.csv") for k in range(1, 5)},
    **{f"job_type_{k}": ("muri", "simulator_trace-data", f"job_type_{k}.csv") for k in range(1, 5)},
    "cluster": ("muri", "cluster_exp_trace-data", "cluster_trace.csv"),
}
#: application -> (model, dataset, Pollux max_epochs, training samples per epoch)
POLLUX_APPLICATIONS: dict[str, tuple[str, str, int, int]] = {
    "cifar10": ("resnet18", "cifar10", 100, 50_000),
    "imagenet": ("resnet50", "imagenet", 90, 1_281_167),
    "bert": ("bert_base", "squad", 2, 88_641),
    "ncf": ("neumf", "movielens", 10, 4_970_845),
    "deepspeech2": ("deepspeech2", "cmu_arctic", 80, 12_000),  # the zoo's GRU-800 short-clip variant
    "yolov3": ("yolov3", "pascal_voc", 50, 16_551),
}


def gavel_vcs(data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Virtual-cluster ids of Gavel's traces.

    Parameters
    ----------
    data_dir
        The data folder (default: found automatically).

    Returns
    -------
    list of str
        The ids.
    """
    return sorted(p.stem for p in data_file(*GAVEL_TRACE_DIR, data_dir=data_dir).glob("*.trace"))


def _gavel_rows(path: Path) -> list[TraceJob]:
    rows = []
    with path.open(newline="") as f:
        for i, fields in enumerate(csv.reader(f, delimiter="\t")):
            if not fields:
                continue
            jt = parse_job_type(fields[0])
            rows.append(
                TraceJob(
                    f"{path.stem}-{i}",
                    float(fields[5]),
                    int(fields[6]),
                    jt.model,
                    jt.batch_size,
                    jt.dataset,
                    total_iterations=float(fields[4]),
                )
            )
    return rows


def read_gavel(
    vc: str | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cluster: Cluster | str | None = None,
    window: Window | None = None,
) -> Instance:
    """One virtual cluster's Gavel trace, or all of them merged (``vc=None``).

    Parameters
    ----------
    vc
        The virtual cluster (one of :func:`gavel_vcs`).
    data_dir
        The data folder (default: found automatically).
    cluster
        The cluster, or its spec (default: one sized for the trace,
        :func:`~dltsched.instances.clusters.default_cluster_for`).
    window
        The part of the trace to keep (default: all).

    Returns
    -------
    Instance
        The instance.

    Raises
    ------
    ValidationError
        When ``vc`` is not one of Gavel's.
    """
    known = gavel_vcs(data_dir)
    if vc is not None and vc not in known:
        raise ValidationError("workload", f"gavel:{vc} not known; one of gavel:{', gavel:'.join(known)}")
    rows = [
        r
        for v in ([vc] if vc else known)
        for r in _gavel_rows(data_file(*GAVEL_TRACE_DIR, f"{v}.trace", data_dir=data_dir))
    ]
    meta = {"source": f"gavel/traces_msr_seed0/{vc or '*'}.trace (Gavel OSDI'20)", "num_rows_read": len(rows)}
    return build_instance(
        f"gavel-{vc or 'all'}",
        rows,
        window=window or Window(),
        cluster=cluster,
        data_dir=data_dir,
        metadata=meta,
    )


def read_muri(
    trace: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cluster: Cluster | str | None = None,
    window: Window | None = None,
) -> Instance:
    """A Muri trace by name (``trace1``..``trace4``, ``job_type_1``..``job_type_4``, ``cluster``).

    Parameters
    ----------
    trace
        The trace's name.
    data_dir, cluster, window
        As for :func:`~dltsched.instances.readers.traces.read_gavel`.

    Returns
    -------
    Instance
        The instance.

    Raises
    ------
    ValidationError
        When ``trace`` is not one of Muri's.
    """
    if trace not in MURI_FILES:
        raise ValidationError("workload", f"muri:{trace} not known; one of muri:{', muri:'.join(MURI_FILES)}")
    path = data_file(*MURI_FILES[trace], data_dir=data_dir)
    with path.open(newline="") as f:
        rows = [
            TraceJob(
                f"muri-{r['job_id']}",
                float(r["submit_time"]) / 1000.0,
                int(r["num_gpu"]),
                r["model_name"],
                int(r["batch_size"]),
                duration_s=float(r["duration"]) / 1000.0,
                total_iterations=float(r["iterations"]),
            )
            for r in csv.DictReader(f)
        ]
    meta = {"source": f"muri/{'/'.join(MURI_FILES[trace][1:])} (Muri SIGCOMM'22)", "num_rows_read": len(rows)}
    return build_instance(
        f"muri-{trace}", rows, window=window or Window(), cluster=cluster, data_dir=data_dir, metadata=meta
    )


def _pollux_row(r: dict[str, str]) -> TraceJob:
    app = r["application"]
    if app not in POLLUX_APPLICATIONS:
        raise ValidationError(
            "application", f"'{app}' not understood; one of {', '.join(POLLUX_APPLICATIONS)}"
        )
    model, dataset, epochs, samples = POLLUX_APPLICATIONS[app]
    replicas, global_batch = int(r["num_replicas"]), int(r["batch_size"])
    return TraceJob(
        r["name"],
        float(r["time"]),
        replicas,
        model,
        math.ceil(global_batch / replicas),
        dataset,
        total_iterations=float(math.ceil(epochs * samples / global_batch)),
        hyperparameters=(("global_batch_size", float(global_batch)), ("application", app)),
    )


def pollux_workload_files(data_dir: str | os.PathLike[str] | None = None) -> dict[str, tuple[str, ...]]:
    """Workload name (``sia:saturn/<file>``, ``sia:philly/<file>``, ``pollux:<file>``) -> data path.

    Parameters
    ----------
    data_dir
        The data folder (default: found automatically).

    Returns
    -------
    dict of str to tuple of str
        The data path (inside the folder) of each workload.
    """
    out: dict[str, tuple[str, ...]] = {}
    for prefix, parts in (
        ("sia:saturn/", ("sia", "workloads", "saturn")),
        ("sia:philly/", ("sia", "workloads", "philly")),
        ("pollux:", ("pollux", "workloads")),
    ):
        for p in sorted(data_file(*parts, data_dir=data_dir).glob("*.csv")):
            out[prefix + p.stem] = (*parts, p.name)
    return out


def read_pollux_workload(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cluster: Cluster | str | None = None,
    window: Window | None = None,
) -> Instance:
    """A Sia or Pollux workload by name, e.g. ``sia:saturn/workload-1`` or ``pollux:workload-1``.

    Parameters
    ----------
    name
        The workload (one of :func:`pollux_workload_files`).
    data_dir, cluster, window
        As for :func:`~dltsched.instances.readers.traces.read_gavel`.

    Returns
    -------
    Instance
        The instance.

    Raises
    ------
    ValidationError
        When ``name`` is not known.
    """
    files = pollux_workload_files(data_dir)
    if name not in files:
        raise ValidationError("workload", f"{name} not known; one of {', '.join(files)}")
    with data_file(*files[name], data_dir=data_dir).open(newline="") as f:
        rows = [_pollux_row(r) for r in csv.DictReader(f)]
    meta = {
        "source": "/".join(files[name]),
        "num_rows_read": len(rows),
        "work_rule": "max_epochs x dataset samples / global batch (see dltsched.instances.readers.traces)",
    }
    return build_instance(
        name.replace(":", "-").replace("/", "-"),
        rows,
        window=window or Window(),
        cluster=cluster,
        data_dir=data_dir,
        metadata=meta,
    )
