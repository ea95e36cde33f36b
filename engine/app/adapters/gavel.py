"""A Gavel policy backed by dltsched: Gavel's per-round inputs in, Gavel's allocation out.

Gavel (Narayanan et al., OSDI 2020) asks its policy for an allocation every round with the throughput
matrix it measured: ``throughputs[job_id][worker_type]`` (steps/s of a job alone on its ``scale_factor``
workers) and, for co-located pairs, ``throughputs[(a, b)][worker_type] = [steps/s of a, steps/s of b]``;
``scale_factors[job_id]`` (workers per job), ``num_steps_remaining[job_id]`` and ``cluster_spec``
(workers per type). It expects ``{job_id or pair: {worker_type: fraction of the round}}`` back.

:class:`GavelPolicy` turns that into one dltsched round of jobs described by their numbers alone
(:data:`~dltsched.engine.domain.model.MEASURED_ONLY`: no model-zoo entry needed, memory trusted), with
Gavel's throughputs as measurements (isolated step time ``1 / throughput``; a pair's speeds its co-located
throughputs over the isolated ones), solves it with :func:`~dltsched.engine.app.api.solve_round` (the
checker accepts every plan) and answers 1.0 for the job or pair the plan runs on a worker type, 0.0
elsewhere. Its ``name`` starts with ``MinTotalDuration``, the policy family whose ``get_allocation``
Gavel calls with ``(throughputs, scale_factors, num_steps_remaining, cluster_spec)`` (remaining steps
make the ``jct`` objective meaningful), and contains ``Packing``, for which Gavel passes pair throughputs.
Job ids are Gavel's ``JobIdPair`` objects (anything with ``singletons()`` whose items have
``integer_job_id()``), ints, strings or ``(a, b)`` / ``(a, None)`` tuples; the allocation is keyed by the
very keys passed in.

Gavel does not tell a policy where jobs run, so each round starts with every job queued and the previous
plan as a warm start; servers are ``gpus_per_server`` workers of one type.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dltsched.engine.app.api import DEFAULT_OPTIONS, RoundOptions, solve_round
from dltsched.engine.app.measured import GroupMeasurement, JobMeasurement, Measurements
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import (
    MEASURED_ONLY,
    Cluster,
    ClusterState,
    Job,
    JobState,
    Node,
    Plan,
    resolve_gpu_type,
)
from dltsched.formulations.pipeline import ConfiguredSolver

#: Gavel's default round length (``--time_per_iteration``), seconds
GAVEL_ROUND_S = 360.0


def members(key: Hashable) -> tuple[str, ...]:
    """The single jobs of a Gavel job key, as strings: ``JobIdPair(3, None)`` / ``3`` / ``(3, None)`` ->
    ``("3",)``; ``JobIdPair(3, 7)`` / ``(3, 7)`` -> ``("3", "7")``."""
    singletons = getattr(key, "singletons", None)
    if callable(singletons):
        return tuple(str(s.integer_job_id()) if hasattr(s, "integer_job_id") else str(s)
                     for s in singletons())
    if isinstance(key, tuple):
        return tuple(str(k) for k in key if k is not None)
    return (str(key),)


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One decided round: plan status, the solver's objective, its time, how many jobs and how many ran."""

    status: str
    objective: float | None
    solve_ms: float
    wall_ms: float
    num_jobs: int
    num_placed: int


class GavelPolicy:
    """dltsched as a Gavel policy.

    Parameters
    ----------
    options
        Round settings (default :data:`~dltsched.engine.app.api.DEFAULT_OPTIONS` with Gavel's 360 s rounds
        and a 2 s time limit).
    backend
        The round solver (``cpsat`` default; see :func:`~dltsched.engine.app.api.solve_round`).
    gpus_per_server
        Workers per server, by worker type or one number for all (Gavel's ``num_gpus_per_server``).
    name
        The policy's name as Gavel sees it (see the module docstring).
    """

    def __init__(self, options: RoundOptions | None = None, *, backend: str = "cpsat",
                 gpus_per_server: int | Mapping[str, int] = 4,
                 name: str = "MinTotalDuration_Packing_dltsched") -> None:
        options = options or replace(DEFAULT_OPTIONS, round_s=GAVEL_ROUND_S, time_limit_s=2.0)
        self.solver = ConfiguredSolver(options, backend=backend)
        self.gpus_per_server = gpus_per_server
        self._name = name
        self.last_plan: Plan | None = None
        self.rounds: list[RoundRecord] = []

    @property
    def name(self) -> str:
        """The policy's name as results and tables show it."""
        return self._name

    def get_allocation(self, unflattened_throughputs: Mapping[Hashable, Mapping[str, Any]],
                       scale_factors: Mapping[Hashable, int],
                       num_steps_remaining: Mapping[Hashable, float] | None = None,
                       cluster_spec: Mapping[str, int] | None = None) -> dict[Hashable, dict[str, float]]:
        """Gavel's policy call: the allocation for this round.

        Parameters
        ----------
        unflattened_throughputs
            Job key -> worker type -> steps/s (single jobs) or ``[steps/s, steps/s]`` (pairs).
        scale_factors
            Single job key -> workers it needs.
        num_steps_remaining
            Single job key -> steps left (``None``: all equal).
        cluster_spec
            Worker type -> number of workers.

        Returns
        -------
        dict
            Every key of ``unflattened_throughputs`` -> worker type -> 1.0 where the plan runs it, else 0.0.

        Raises
        ------
        ValidationError
            When an input is not understood (the message names it).
        """
        if cluster_spec is None:
            raise ValidationError("cluster_spec", "missing; Gavel's worker type -> number of workers")
        began = time.perf_counter()
        state, measured, keys = self.round_of(unflattened_throughputs, scale_factors, num_steps_remaining,
                                              cluster_spec)
        allocation = {key: {wt: 0.0 for wt in cluster_spec} for key in unflattened_throughputs}
        if not state.jobs:
            return allocation
        pairs = bool(measured.groups)
        options = self.solver.options if pairs else replace(self.solver.options, max_jobs_per_gpu=1)
        plan = solve_round(state, replace(self.solver, options=options), measurements=measured,
                           warm_start=self.last_plan)
        self.last_plan = plan
        worker_type = {t: wt for wt in cluster_spec for t in [_catalog_type(wt)]}
        groups = plan.colocation_groups()
        for a in plan.assignments:
            partners = sorted({p for g in a.gpus for p in groups.get(g, ()) if p != a.job_id})
            wt = worker_type[state.cluster.gpu_type_of(a.gpus[0])]
            key = keys.get(tuple(sorted((a.job_id, *partners)))) if partners else keys.get((a.job_id,))
            if key is not None:
                allocation[key][wt] = 1.0
        self.rounds.append(RoundRecord(plan.status, plan.objective, 1e3 * plan.solve_time_s,
                                       1e3 * (time.perf_counter() - began), len(state.jobs),
                                       len(plan.assignments)))
        return allocation

    def round_of(self, throughputs: Mapping[Hashable, Mapping[str, Any]],
                 scale_factors: Mapping[Hashable, int], num_steps_remaining: Mapping[Hashable, float] | None,
                 cluster_spec: Mapping[str, int],
                 ) -> tuple[ClusterState, Measurements, dict[tuple[str, ...], Hashable]]:
        """The dltsched round of Gavel's inputs: the state, the measurements and sorted job ids -> Gavel
        key."""
        cluster = self.cluster_of(cluster_spec)
        keys: dict[tuple[str, ...], Hashable] = {}
        jobs: list[JobState] = []
        seen: dict[str, JobMeasurement] = {}
        remaining = {members(k)[0]: v for k, v in (num_steps_remaining or {}).items()}
        scale = {members(k)[0]: v for k, v in scale_factors.items()}
        for key, per_type in throughputs.items():
            ids = members(key)
            keys[tuple(sorted(ids))] = key
            if len(ids) != 1:
                continue
            job_id = ids[0]
            steps = {_catalog_type(wt): 1.0 / float(t) for wt, t in per_type.items()
                     if wt in cluster_spec and _positive(t)}
            if not steps:
                continue  # runs on no worker type here: allocation 0
            workers = scale.get(job_id)
            if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
                raise ValidationError(f"scale_factors[{job_id}]",
                                      f"{workers!r} not understood; a whole number >= 1")
            left = float(remaining.get(job_id, 1.0))
            if not math.isfinite(left):
                raise ValidationError(f"num_steps_remaining[{job_id}]",
                                      f"{left!r} not understood; a finite number")
            left = max(1.0, left)
            allowed = tuple(t for t in steps if cluster.max_gpus_of_type(t) >= workers)
            if not allowed:
                continue  # larger than every worker type it can run on
            job = Job(job_id, MEASURED_ONLY, 1, left, num_gpus=workers, gpu_types=allowed)
            jobs.append(JobState(job, left))
            seen[job_id] = JobMeasurement(step_time_s=steps)
        groups = []
        for key, per_type in throughputs.items():
            ids = members(key)
            if len(ids) != 2 or not all(i in seen for i in ids) or scale.get(ids[0]) != scale.get(ids[1]):
                continue
            for wt, pair in per_type.items():
                t = _catalog_type(wt) if wt in cluster_spec else None
                if (t is None or not isinstance(pair, list | tuple) or len(pair) != 2
                        or not all(map(_positive, pair))):
                    continue
                alone = [seen[i].step_time_s.get(t) for i in ids]
                if any(s is None for s in alone):
                    continue
                speeds = tuple(min(1.5, float(p) * s) for p, s in zip(pair, alone, strict=True)
                               if s is not None)
                groups.append(GroupMeasurement(ids, t, speeds=speeds))
        state = ClusterState(float(len(self.rounds)) * self.solver.options.round_s, cluster, tuple(jobs))
        return state, Measurements(seen, tuple(groups), unknown_memory="trust"), keys

    def cluster_of(self, cluster_spec: Mapping[str, int]) -> Cluster:
        """Servers of ``gpus_per_server`` workers per type (the last one holds the rest)."""
        nodes = []
        for wt, count in cluster_spec.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValidationError(f"cluster_spec[{wt}]", f"{count!r} not understood; a whole number >= 0")
            per = self.gpus_per_server if isinstance(self.gpus_per_server,
                                                     int) else self.gpus_per_server.get(wt, 4)
            gpu_type = _catalog_type(wt)
            for i, first in enumerate(range(0, count, per)):
                nodes.append(Node(f"{wt}-{i}", gpu_type, min(per, count - first)))
        if not nodes:
            raise ValidationError("cluster_spec", "no workers; give at least one worker type with workers")
        return Cluster(tuple(nodes))


def _catalog_type(worker_type: str) -> str:
    try:
        return resolve_gpu_type(worker_type).id
    except ValueError as err:
        raise ValidationError(f"cluster_spec[{worker_type}]", str(err)) from None


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value,
                                                      int | float) and math.isfinite(value) and value > 0


Allocator = Callable[[Mapping[Hashable, Mapping[str, Any]], Mapping[Hashable, int], Mapping[Hashable, float],
                      Mapping[str, int]], Mapping[Hashable, Mapping[str, float]]]


def replay(allocate: Allocator, throughputs: Mapping[Hashable, Mapping[str, Any]],
           scale_factors: Mapping[Hashable, int], num_steps: Mapping[Hashable, float],
           cluster_spec: Mapping[str, int], *, round_s: float = GAVEL_ROUND_S,
           max_rounds: int = 10_000) -> dict[str, float]:
    """Run a fixed job set to completion under ``allocate`` in rounds of ``round_s``, the simplest form of
    Gavel's round-based mechanism: each round the jobs (or pairs) allocated 1.0 on a worker type run the
    whole round at their measured throughput (a pair at its co-located one) and a job ends mid-round when
    its steps are done. Every job arrives at time 0.

    Returns
    -------
    dict
        ``avg_jct_s``, ``makespan_s``, ``rounds``; raises :class:`ValidationError` when an allocation uses
        more workers of a type than ``cluster_spec`` has or runs a job twice.
    """
    left = {members(k)[0]: float(v) for k, v in num_steps.items()}
    by_members = {tuple(members(k)): k for k in throughputs}
    done: dict[str, float] = {}
    for r in range(max_rounds):
        active = {k: v for k, v in throughputs.items() if all(m in left for m in members(k))}
        if not left:
            break
        alloc = allocate(active, {k: v for k, v in scale_factors.items() if members(k)[0] in left},
                         {k: left[members(k)[0]] for k in num_steps if members(k)[0] in left}, cluster_spec)
        used = dict.fromkeys(cluster_spec, 0)
        running: set[str] = set()
        speed: dict[str, float] = {}
        for key, per_type in alloc.items():
            for wt, share in per_type.items():
                if share < 0.5:
                    continue
                ids = members(key)
                if running.intersection(ids):
                    raise ValidationError(f"allocation[{key}]",
                                          f"runs {sorted(running.intersection(ids))} twice")
                running.update(ids)
                used[wt] += scale_factors[by_members[(ids[0],)]]
                rates = throughputs[key][wt]
                for i, job in enumerate(ids):
                    speed[job] = float(rates[i] if isinstance(rates, list | tuple) else rates)
        if over := [wt for wt in used if used[wt] > cluster_spec[wt]]:
            raise ValidationError("allocation", f"round {r}: more {over} workers than the cluster has")
        for job, rate in speed.items():
            if rate <= 0:
                continue
            need = left[job] / rate
            if need <= round_s:
                done[job] = r * round_s + need
                del left[job]
            else:
                left[job] -= rate * round_s
    if left:
        raise ValidationError("replay", f"{len(left)} jobs unfinished after {max_rounds} rounds")
    return {"avg_jct_s": sum(done.values()) / len(done), "makespan_s": max(done.values()), "rounds": float(r)}


def _one_each(throughputs: Mapping[Hashable, Mapping[str, Any]], scale_factors: Mapping[Hashable, int],
              cluster_spec: Mapping[str, int],
              order: Callable[[str], Any]) -> dict[Hashable, dict[str, float]]:
    """Gavel's allocation of the single jobs in ``order`` (of their ids), each on the fastest worker type with
    room, no co-location."""
    free = dict(cluster_spec)
    out: dict[Hashable, dict[str, float]] = {k: dict.fromkeys(cluster_spec, 0.0) for k in throughputs}
    for key in sorted((k for k in throughputs if len(members(k)) == 1), key=lambda k: order(members(k)[0])):
        need = scale_factors[key]
        options = [(float(t), wt) for wt, t in throughputs[key].items() if _positive(t)
                   and free.get(wt, 0) >= need]
        if options:
            wt = max(options)[1]
            out[key][wt] = 1.0
            free[wt] -= need
    return out


def fifo_allocation(throughputs: Mapping[Hashable, Mapping[str, Any]], scale_factors: Mapping[Hashable, int],
                    num_steps_remaining: Mapping[Hashable, float], cluster_spec: Mapping[str, int],
                    ) -> dict[Hashable, dict[str, float]]:
    """A FIFO baseline in Gavel's allocation shape: jobs in id order, each on the fastest worker type with
    room, no co-location."""
    return _one_each(throughputs, scale_factors, cluster_spec, _order)


def las_allocation() -> Allocator:
    """A least-attained-service baseline (what max-min fairness over time reduces to in rounds of whole
    workers): each round the jobs with the fewest rounds received so far run, on the fastest worker type with
    room, no co-location."""
    received: dict[str, int] = {}

    def allocate(throughputs: Mapping[Hashable, Mapping[str, Any]], scale_factors: Mapping[Hashable, int],
                 num_steps_remaining: Mapping[Hashable, float], cluster_spec: Mapping[str, int],
                 ) -> dict[Hashable, dict[str, float]]:
        out = _one_each(throughputs, scale_factors, cluster_spec, lambda j: (received.get(j, 0), _order(j)))
        for key, shares in out.items():
            if any(shares.values()):
                received[members(key)[0]] = received.get(members(key)[0], 0) + 1
        return out

    return allocate

def _order(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (1 << 62, job_id)


def load_recorded(path: str) -> tuple[dict[Hashable, Any], dict[Hashable, int], dict[Hashable, float],
                                      dict[str, int]]:
    """A recorded round (``tests/adapters/data/gavel_round_*.json``): keys as printed ``JobIdPair`` s
    (``"(3, None)"``, ``"(3, 7)"``) become ``(3, None)`` / ``(3, 7)`` tuples."""
    import ast
    import json
    from pathlib import Path

    data = json.loads(Path(path).read_text())

    def keyed(d: Mapping[str, Any]) -> dict[Hashable, Any]:
        return {ast.literal_eval(k): v for k, v in d.items()}

    return (keyed(data["unflattened_throughputs"]), keyed(data["scale_factors"]),
            keyed(data["num_steps_remaining"]), dict(data["cluster_spec"]))


def main(paths: list[str]) -> None:
    """Replay each recorded Gavel round's job set under :class:`GavelPolicy`, FIFO and least attained
    service; print average JCT, makespan and the adapter's per-round solve statistics."""
    import statistics

    for path in paths:
        inputs = load_recorded(path)
        policy = GavelPolicy()
        ours = replay(policy.get_allocation, *inputs)
        fifo = replay(fifo_allocation, *inputs)
        las = replay(las_allocation(), *inputs)
        rounds = policy.rounds
        print(f"{path}: avg JCT dltsched {ours['avg_jct_s'] / 3600:.2f} h, FIFO "
              f"{fifo['avg_jct_s'] / 3600:.2f} h, "
              f"LAS {las['avg_jct_s'] / 3600:.2f} h; makespan {ours['makespan_s'] / 3600:.2f} / "
              f"{fifo['makespan_s'] / 3600:.2f} / {las['makespan_s'] / 3600:.2f} h; rounds "
              f"{len(rounds)}, optimal "
              f"{sum(r.status == 'optimal' for r in rounds)}, solve ms mean "
              f"{statistics.mean(r.solve_ms for r in rounds):.1f}, "
              f"ms per round median {statistics.median(r.wall_ms for r in rounds):.1f}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
