"""Simulation metrics: job completion times, makespan, queueing, utilisation, fairness, decision time.

Finish-time fairness follows Themis (Mahajan et al., NSDI'20): ``rho = JCT / ideal``, where ``ideal`` is the
job's run time alone on its requested GPUs of the fastest type in the cluster (ground-truth rates), with
no queueing. ``rho <= 1`` is fair; we report the mean and the maximum.

Every makespan comes with a lower bound and the gap to it (``makespan / bound - 1``): the bound is the larger
of the work bound (total work over capacity: on one GPU type, each job's GPUs x its time alone, summed, over
the GPUs; on several, the least time in which each type's GPUs can do the work, each job's work divisible over
the types at its speed there, :func:`work_bound_s`), the latest ``arrival + ideal`` (the longest job alone on
its fastest GPUs) and the gang chain (jobs too large to share a GPU type run one after another on it,
:func:`gang_bound_s`), all counted from the first arrival.
It holds for every schedule in which GPUs run one job at a time at no more than the job's isolated speed;
freezing (fewer useful iterations per step, faster steps) and co-location whose speeds sum above 1 can beat
it, so a negative gap is possible and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from dltsched.engine.domain.model import Instance, Job


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One finished job."""

    job_id: str
    arrival_s: float
    first_start_s: float
    finish_s: float
    num_gpus: int
    preemptions: int
    attained_gpu_s: float
    weight: float = 1.0

    @property
    def jct_s(self) -> float:
        """Job completion time: finish less arrival, seconds."""
        return self.finish_s - self.arrival_s

    @property
    def queueing_s(self) -> float:
        """Time from arrival to the first start, seconds."""
        return self.first_start_s - self.arrival_s


@dataclass(frozen=True, slots=True)
class PlacementInterval:
    """A job held ``gpus`` at ``freeze_level`` from ``start_s`` to ``end_s`` (for Gantt charts)."""

    job_id: str
    gpus: tuple[int, ...]
    start_s: float
    end_s: float
    freeze_level: int = 0


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """Summary of one simulation; ``to_dict()`` gives the JSON the CLI prints."""

    policy: str
    instance: str
    num_jobs: int
    num_jobs_finished: int
    num_jobs_unfinished: int
    avg_jct_s: float
    median_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    weighted_avg_jct_s: float
    makespan_s: float
    avg_queueing_s: float
    p99_queueing_s: float
    gpu_util: float
    num_preemptions: int
    #: crashes out of memory: starts that did not fit beside the jobs on their GPUs (re-queued each time)
    num_oom: int
    node_failures: int
    fault_interruptions: int
    ftf_mean: float
    ftf_max: float
    num_rounds: int
    decision_time_mean_s: float
    decision_time_p50_s: float
    decision_time_p90_s: float
    decision_time_p99_s: float
    decision_time_max_s: float
    decision_time_total_s: float
    wall_time_s: float
    #: lower bound on the makespan (:func:`makespan_lower_bound_s`) and the makespan's gap to it
    makespan_bound_s: float = float("nan")
    makespan_gap: float = float("nan")
    records: tuple[JobRecord, ...] = ()
    utilization: tuple[tuple[float, float], ...] = ()
    placements: tuple[PlacementInterval, ...] = ()
    #: the ground truth the run advanced jobs with: ``measured`` or ``analytic`` (another class: its name)
    truth: str = ""
    #: the measurements behind a measured truth, e.g. ``("gavel:packaged",)`` or ``("gavel", "lucid")``
    truth_sources: tuple[str, ...] = ()

    @property
    def oom_events(self) -> int:
        """Former name of :attr:`num_oom`."""
        return self.num_oom

    def to_dict(self, *, records: bool = False, utilization: bool = False) -> dict[str, object]:
        """JSON-ready dict; ``records`` adds per-job records and placement intervals."""
        # the per-job tuples are left out of the deep copy (a long trace holds hundreds of thousands of them)
        out = asdict(replace(self, records=(), utilization=(), placements=()))
        if records:
            out["records"] = [asdict(r) | {"jct_s": r.jct_s} for r in self.records]
            out["placements"] = [asdict(p) | {"gpus": list(p.gpus)} for p in self.placements]
        else:
            out.pop("records")
            out.pop("placements")
        if utilization:
            out["utilization"] = [list(p) for p in self.utilization]
        else:
            out.pop("utilization")
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in out.items()}


def makespan_lower_bound_s(instance: Instance, times_s: dict[str, dict[str, float]]) -> float:
    """max(work bound, latest arrival + fastest time alone, gang chain), from the first arrival; NaN
    when no job has a time. ``times_s``: job id -> GPU type -> its run time alone on its GPUs of that type."""
    jobs = [j for j in instance.jobs if times_s.get(j.id)]
    if not jobs:
        return float("nan")
    first = min(j.arrival_time_s for j in instance.jobs)
    longest = max(j.arrival_time_s - first + min(times_s[j.id].values()) for j in jobs)
    by_type = instance.cluster.gpus_by_type()
    return float(max(work_bound_s(jobs, times_s, by_type), longest, gang_bound_s(jobs, times_s, by_type)))


def gang_bound_s(jobs: Sequence[Job], times_s: dict[str, dict[str, float]],
                 gpus_by_type: dict[str, int]) -> float:
    """Jobs too large to share a GPU type run one after another on it. On a type with ``G`` GPUs, jobs of
    more than ``G / 2`` GPUs cannot overlap, nor can one more job of more than ``G`` minus the smallest of
    them. Such a job ``j`` may move to another type, where it runs no faster than ``e_j`` (its time alone on
    its fastest other type): within a makespan ``T`` it does at least the share ``(e_j - T) / (e_j - d_j)``
    of its work on this type, ``d_j`` its time here. The bound is the least ``T`` for which these shares of
    the ``d_j``, run one after another, fit in ``T``."""
    best = 0.0
    for gtype, total in gpus_by_type.items():
        here = [j for j in jobs if gtype in times_s[j.id]]
        large = [j for j in here if 2 * j.num_gpus > total]
        if not large:
            continue
        smallest = min(j.num_gpus for j in large)
        others = [j for j in here if 2 * j.num_gpus <= total and j.num_gpus > total - smallest]
        if others:  # at most one of these fits beside no large job: the one that adds the most
            large.append(max(others, key=lambda j: times_s[j.id][gtype]))
        chain = [(times_s[j.id][gtype], min((t for u, t in times_s[j.id].items() if u != gtype),
                                            default=math.inf)) for j in large]

        def needed(span: float, chain: list[tuple[float, float]] = chain) -> float:
            """Time the chain must spend on this type within ``span``."""
            return sum(d if math.isinf(e) else d * min(1.0, max(0.0, (e - span) / (e - d)))
                       for d, e in chain if e > d)

        low, high = 0.0, sum(d for d, e in chain if e > d)
        for _ in range(60):  # needed() falls as the span grows: bisect where it meets the span
            mid = (low + high) / 2
            low, high = (mid, high) if needed(mid) > mid else (low, mid)
        best = max(best, low)
    return best


def work_bound_s(jobs: Sequence[Job], times_s: dict[str, dict[str, float]],
                 gpus_by_type: dict[str, int]) -> float:
    """Least time in which the GPUs of each type can do all the work, each job's work divisible over types at
    its speed on each (an LP: min T with sum_t x_jt = 1 and sum_j x_jt n_j d_jt <= G_t T). On one GPU type it
    is total work / capacity.

    Jobs whose work vectors over the types are proportional (the same model and gang on the same types: the
    whole of a long trace falls into a few hundred such classes) are one row of the LP with their summed
    work: any split of the class's work over the types is open to each of its jobs alone, so the optimum is
    the same."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_array

    types = sorted({t for j in jobs for t in times_s[j.id]})
    if len(types) == 1:
        return sum(j.num_gpus * times_s[j.id][types[0]] for j in jobs) / gpus_by_type[types[0]]
    where = {t: i for i, t in enumerate(types)}
    work = np.zeros((len(jobs), len(types)))  # a job's GPUs x its time alone per type; 0: not on that type
    for k, j in enumerate(jobs):
        row = work[k]
        for t, d in times_s[j.id].items():
            row[where[t]] = j.num_gpus * d
    first = work[np.arange(len(jobs)), np.argmax(work > 0, axis=1)]
    if (first > 0).all():  # one row per class of proportional work vectors (bitwise equal ratios)
        _, of_class = np.unique(work / first[:, None], axis=0, return_inverse=True)
        of_class = of_class.reshape(-1)
        summed = np.zeros((int(of_class.max()) + 1, len(types)))
        np.add.at(summed, of_class, work)
        work = summed
    rows_at, cols_at = np.nonzero(work > 0)
    n = len(rows_at)
    cost = np.zeros(n + 1)
    cost[n] = 1.0
    # sparse rows (a dense matrix of the full Philly trace would take 151 GiB)
    a_eq = coo_array((np.ones(n), (rows_at, np.arange(n))), shape=(len(work), n + 1)).tocsr()
    capacity = [-float(gpus_by_type[t]) for t in types]
    rows = np.concatenate((cols_at, np.arange(len(types))))
    columns = np.concatenate((np.arange(n), np.full(len(types), n)))
    a_ub = coo_array((np.concatenate((work[rows_at, cols_at], capacity)), (rows, columns)),
                     shape=(len(types), n + 1)).tocsr()
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(len(types)), A_eq=a_eq, b_eq=np.ones(len(work)),
                  bounds=[(0, None)] * (n + 1), method="highs")
    if res.status != 0:
        return sum(j.num_gpus * min(times_s[j.id].values()) for j in jobs) / sum(gpus_by_type.values())
    return float(res.x[n])


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else 0.0


def _downsample(trace: Sequence[tuple[float, float]], n: int) -> tuple[tuple[float, float], ...]:
    if len(trace) <= n:
        return tuple(trace)
    idx = np.linspace(0, len(trace) - 1, n).astype(int)
    return tuple(trace[i] for i in idx)


def summarize(*, policy: str, instance: Instance, records: list[JobRecord], busy_gpu_s: float,
              util_trace: list[tuple[float, float]], decision_times_s: list[float], wall_time_s: float,
              num_oom: int, unfinished: int, ideal_s: dict[str, float] | None = None,
              placements: list[PlacementInterval] | None = None, node_failures: int = 0,
              fault_interruptions: int = 0, utilization_samples: int = 400, truth: str = "",
              truth_sources: tuple[str, ...] = (),
              times_s: dict[str, dict[str, float]] | None = None) -> SimulationResult:
    """Aggregate per-job records into a :class:`SimulationResult`; the utilisation trace is downsampled
    to at most ``utilization_samples`` points. ``times_s`` (job id -> GPU type -> run time alone) gives the
    makespan's lower bound."""
    jct = np.array([r.jct_s for r in records], dtype=float)
    weights = np.array([r.weight for r in records], dtype=float)
    queue = np.array([r.queueing_s for r in records], dtype=float)
    first_arrival = min((j.arrival_time_s for j in instance.jobs), default=0.0)
    last_finish = max((r.finish_s for r in records), default=first_arrival)
    makespan = last_finish - first_arrival
    gpu_util = busy_gpu_s / (instance.cluster.num_gpus * makespan) if makespan > 0 else 0.0
    if ideal_s:
        rho = np.array([r.jct_s / ideal_s[r.job_id] for r in records if ideal_s.get(r.job_id)], dtype=float)
    else:
        rho = np.array([], dtype=float)
    dec = np.array(decision_times_s, dtype=float)
    bound = makespan_lower_bound_s(instance, times_s or {})
    return SimulationResult(
        policy=policy, instance=instance.name, num_jobs=len(instance.jobs), num_jobs_finished=len(records),
        num_jobs_unfinished=unfinished,
        avg_jct_s=float(jct.mean()) if jct.size else 0.0, median_jct_s=_pct(jct, 50), p95_jct_s=_pct(jct, 95),
        p99_jct_s=_pct(jct, 99),
        weighted_avg_jct_s=float((jct * weights).sum() / weights.sum()) if jct.size else 0.0,
        makespan_s=makespan, avg_queueing_s=float(queue.mean()) if queue.size else 0.0,
        p99_queueing_s=_pct(queue, 99), gpu_util=gpu_util,
        num_preemptions=sum(r.preemptions for r in records), num_oom=num_oom,
        node_failures=node_failures, fault_interruptions=fault_interruptions,
        ftf_mean=float(rho.mean()) if rho.size else float("nan"),
        ftf_max=float(rho.max()) if rho.size else float("nan"),
        num_rounds=len(decision_times_s), decision_time_mean_s=float(dec.mean()) if dec.size else 0.0,
        decision_time_p50_s=_pct(dec, 50), decision_time_p90_s=_pct(dec, 90),
                            decision_time_p99_s=_pct(dec, 99),
        decision_time_max_s=float(dec.max()) if dec.size else 0.0, decision_time_total_s=float(dec.sum()),
        wall_time_s=wall_time_s, makespan_bound_s=bound,
        makespan_gap=makespan / bound - 1.0 if bound > 0 and records and not unfinished else float("nan"),
        records=tuple(records), utilization=_downsample(util_trace, utilization_samples),
        placements=tuple(placements or ()), truth=truth, truth_sources=tuple(truth_sources),
    )
