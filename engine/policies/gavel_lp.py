"""Gavel-style policy: an LP over co-location throughputs, rounded to a placement every round.

Follows Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads"
(Gavel), OSDI'20, with its space-sharing extension: variables are the fraction of time each job spends in
each configuration (alone on a GPU type, or sharing one GPU of a type with a partner job); the objective is
Gavel's maximum total normalized throughput (each job's throughput over its best isolated throughput);
constraints: each job's fractions sum to at most 1, and each type's GPUs are not over-allocated. The LP
(OR-Tools GLOP) is re-solved every round; its fractions become priorities, and the configurations are
placed greedily in priority order (running jobs keep their GPUs when their configuration is kept).
Like Gavel's round-based mechanism, the LP is re-solved once per round (``round_interval_s``); events
inside a round keep running jobs in place and start new arrivals greedily on free GPUs.
Pair candidates are limited to each single-GPU job's ``pair_candidates`` best partners by predicted
combined speed, keeping the LP small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ortools.linear_solver import pywraplp

from dltsched.engine.domain.model import Assignment, ClusterState, JobState, Plan
from dltsched.engine.domain.predictors import Predictors, memoized, memory_observations_version
from dltsched.engine.domain.profiles import profile_version
from dltsched.engine.policies.placement import Estimates, GpuPool
from dltsched.predictors import available_predictors


@dataclass
class GavelPolicy:
    """Max total normalized throughput LP with space sharing (see module docstring).

    Parameters
    ----------
    predictors
        What the policy may know of jobs (step time, memory, co-location, freezing predictions).
    pair_candidates
        Co-location partners tried per job.
    memory_margin
        Share of a GPU's memory a pair may fill.
    colocation
        Allow space sharing (pairs of jobs on one GPU).
    name
        The policy's name in results.
    round_interval_s
        A round at least this often, seconds (``None``: on arrivals and completions only).
    max_jobs_per_gpu
        Jobs sharing one GPU at most.
    """

    predictors: Predictors = field(default_factory=available_predictors)
    pair_candidates: int = 2
    memory_margin: float = 0.9
    colocation: bool = True
    name: str = "gavel"
    round_interval_s: float | None = 360.0
    max_jobs_per_gpu: int = 2

    def __post_init__(self) -> None:
        self._asked = memoized(self.predictors)  # rounds ask about the same jobs again and again
        self._est = Estimates(self._asked)
        self._last_solve_s = float("-inf")
        self._last_allocation: tuple[Any, Any] | None = None  # (what the LP depended on, its answer)

    def _pairs(self, jobs: list[JobState], state: ClusterState) -> list[tuple[int, int, str, float, float]]:
        """(i, k, type, speed_i, speed_k) for promising co-location pairs."""
        if not self.colocation:
            return []
        singles = [i for i, s in enumerate(jobs) if s.job.num_gpus == 1]
        out: dict[tuple[int, int, str], tuple[float, float]] = {}
        for i in singles:
            types = self._est.candidate_types(jobs[i].job, state.cluster)
            if not types:
                continue
            t = types[0]
            cap = state.cluster.gpu_types[t].memory_mib * self.memory_margin
            scored = []
            for k in singles:
                if k == i or (jobs[k].job.gpu_types and t not in jobs[k].job.gpu_types):
                    continue
                if self._est.memory_mib(jobs[i].job, t) + self._est.memory_mib(jobs[k].job, t) > cap:
                    continue
                si, sk = self._asked.colocation.colocated_speeds([jobs[i].job, jobs[k].job], t)
                if si + sk > 1.0:
                    scored.append((-(si + sk), k, si, sk))
            for _neg, k, si, sk in sorted(scored)[: self.pair_candidates]:
                key = (min(i, k), max(i, k), t)
                out[key] = (si, sk) if i < k else (sk, si)
        return [(i, k, t, si, sk) for (i, k, t), (si, sk) in sorted(out.items())]

    def allocation(self, state: ClusterState) -> tuple[list[JobState], dict[tuple[int, str], float],
                                                       list[tuple[int, int, str, float]]]:
        """Solve the LP of the round.

        Parameters
        ----------
        state
            The round's snapshot.

        Returns
        -------
        jobs : list of JobState
            The jobs, in arrival order (indices below refer to it).
        singles : dict of (int, str) to float
            Time fraction of each job alone on each GPU type.
        pairs : list of (int, int, str, float)
            ``(i, k, type, fraction)`` for each co-located pair.
        """
        jobs = sorted(state.jobs, key=lambda s: (s.job.arrival_time_s, s.job.id))
        # The LP reads the jobs' specs, the GPUs that are up and predictions (which change only when the run
        # learns a memory peak or profiles a job), never progress or placement: the same inputs, the same LP.
        depends_on = (tuple(s.job for s in jobs), tuple(sorted(state.available_by_type().items())),
                      memory_observations_version(), tuple(profile_version(s.job.id) for s in jobs))
        if self._last_allocation is not None and self._last_allocation[0] == depends_on:
            single_x, pair_y = self._last_allocation[1]
            return jobs, single_x, pair_y
        single_x, pair_y = self._solve_lp(jobs, state)
        self._last_allocation = (depends_on, (single_x, pair_y))
        return jobs, single_x, pair_y

    def _solve_lp(self, jobs: list[JobState], state: ClusterState
                  ) -> tuple[dict[tuple[int, str], float], list[tuple[int, int, str, float]]]:
        solver = pywraplp.Solver.CreateSolver("GLOP")
        avail = state.available_by_type()
        single: dict[tuple[int, str], pywraplp.Variable] = {}
        objective = solver.Objective()
        per_job: list[list[pywraplp.Variable]] = [[] for _ in jobs]
        per_type: dict[str, list[tuple[pywraplp.Variable, int]]] = {t: [] for t in avail}
        best_thr: list[float] = []
        for i, s in enumerate(jobs):
            types = self._est.candidate_types(s.job, state.cluster)
            best_thr.append(1.0 / self._est.step_time_s(s.job, types[0]) if types else 1.0)
            for t in types:
                v = solver.NumVar(0.0, 1.0, f"x{i}_{t}")
                single[(i, t)] = v
                per_job[i].append(v)
                per_type[t].append((v, s.job.num_gpus))
                objective.SetCoefficient(v, (1.0 / self._est.step_time_s(s.job, t)) / best_thr[i])
        pair_vars = []
        for i, k, t, si, sk in self._pairs(jobs, state):
            v = solver.NumVar(0.0, 1.0, f"y{i}_{k}_{t}")
            per_job[i].append(v)
            per_job[k].append(v)
            per_type[t].append((v, 1))
            gain = si / self._est.step_time_s(jobs[i].job, t) / best_thr[i]
            gain += sk / self._est.step_time_s(jobs[k].job, t) / best_thr[k]
            objective.SetCoefficient(v, gain)
            pair_vars.append((i, k, t, v))
        for vs in per_job:
            if vs:
                c = solver.Constraint(0.0, 1.0)
                for v in vs:
                    c.SetCoefficient(v, 1.0)
        for t, terms in per_type.items():
            c = solver.Constraint(0.0, float(avail.get(t, 0)))
            for v, n in terms:
                c.SetCoefficient(v, float(n))
        objective.SetMaximization()
        solver.Solve()
        return ({key: v.solution_value() for key, v in single.items()},
                [(i, k, t, v.solution_value()) for i, k, t, v in pair_vars])

    def schedule(self, state: ClusterState) -> Plan:
        """The plan of one round: every placement: the LP's allocation rounded to whole GPUs."""
        if not state.jobs:
            return Plan()
        if (self.round_interval_s is not None
                and state.time_s - self._last_solve_s < self.round_interval_s - 1e-9):
            from dltsched.engine.policies.greedy import place_exclusive

            return place_exclusive(state, state.queued(), self._est, blocking=False)
        self._last_solve_s = state.time_s
        jobs, single, pairs = self.allocation(state)
        options: list[tuple[float, int, tuple[int, ...], str]] = []
        for (i, t), x in single.items():
            here = jobs[i].assignment
            sticky = 0.01 if here is not None and state.cluster.gpu_type_of(here.gpus[0]) == t else 0.0
            if x > 1e-6:
                options.append((-(x + sticky), i, (i,), t))
        for i, k, t, y in pairs:
            if y > 1e-6:
                options.append((-y, min(i, k), (i, k), t))
        options.sort()
        pool = GpuPool.empty(state)
        placed: dict[int, Assignment] = {}
        for _neg, _i, members, t in options:  # running jobs first keep their GPUs when the type is kept
            if len(members) == 1 and members[0] not in placed:
                a = jobs[members[0]].assignment
                if a is not None and state.cluster.gpu_type_of(a.gpus[0]) == t and pool.are_free(a.gpus):
                    pool.occupy(a.job_id, a.gpus)
                    placed[members[0]] = a
        for _neg, _i, members, t in options:
            if any(m in placed for m in members):
                continue
            lead = jobs[members[0]].job
            gpus = pool.take_free(lead, t)
            if gpus is None:
                continue
            for m in members:
                pool.occupy(jobs[m].job.id, gpus)
                placed[m] = Assignment(jobs[m].job.id, gpus)
        return Plan(tuple(placed.values()))

    def state_dict(self) -> dict[str, float | None]:
        """The policy's state for a checkpoint.

        Returns
        -------
        dict of str to float or None
            When the LP was last solved (``None``: never).
        """
        return {"last_solve_s": self._last_solve_s if self._last_solve_s != float("-inf") else None}

    def load_state_dict(self, data: dict[str, float | None]) -> None:
        """Restore the state :meth:`state_dict` gave.

        Parameters
        ----------
        data
            The saved state.
        """
        value = data.get("last_solve_s")
        self._last_solve_s = float("-inf") if value is None else float(value)
