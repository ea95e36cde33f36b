"""Synthetic rounds for solver benchmarks: 3 GPU types, 8-GPU nodes, half the jobs running.

Sizes are ``JOBSxGPUS`` (e.g. ``200x256``). Jobs draw a model from a fixed list, a gang size of
1 (70%), 2, 4 or 8 GPUs, allow 4 freeze levels (accuracy budget 0.05); running jobs sit alone on
GPUs of one node, placed first-fit. Everything is seeded.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from dltsched.engine.domain.model import Assignment, Cluster, ClusterState, Job, JobState, Node
from dltsched.engine.domain.predictors import Predictors
from dltsched.formulations.build import build_round
from dltsched.formulations.gcpause import gc_paused
from dltsched.formulations.problem import RoundOptions, RoundProblem

GPU_TYPES = ("v100", "a100-40gb", "h100")
MODELS = ("resnet18", "resnet50", "vgg16", "mobilenet_v2", "bert_base", "transformer", "lstm_lm", "dcgan",
          "neumf", "pointnet", "a3c", "shufflenet_v2")
DEFAULT_SIZES = ("20x16", "200x256", "1000x1024")


def parse_size(text: str) -> tuple[int, int]:
    """A benchmark size written ``JOBSxGPUS`` (e.g. ``200x256``).

    Parameters
    ----------
    text
        The size.

    Returns
    -------
    tuple[int, int]
        Jobs and GPUs.

    Raises
    ------
    ValueError
        When it is not two numbers, or not at least one job and a positive multiple of 8 GPUs.
    """
    try:
        jobs, gpus = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"sizes: '{text}' not understood; write JOBSxGPUS, e.g. 200x256") from None
    if jobs < 1 or gpus < 8 or gpus % 8:
        raise ValueError(f"sizes: '{text}' not understood; >= 1 job and a multiple of 8 GPUs")
    return jobs, gpus


def synthetic_state(num_jobs: int, num_gpus: int, seed: int = 0,
                    running_fraction: float = 0.5) -> ClusterState:
    """A seeded snapshot: ``num_gpus`` GPUs in 8-GPU nodes cycling over three types."""
    rng = random.Random(seed)
    nodes = tuple(Node(f"n{i}", GPU_TYPES[i % len(GPU_TYPES)], 8) for i in range(num_gpus // 8))
    cluster = Cluster(nodes)
    free = {i: list(cluster.node_gpus(i)) for i in range(len(nodes))}
    states = []
    for j in range(num_jobs):
        size = rng.choices((1, 2, 4, 8), weights=(70, 15, 10, 5))[0]
        job = Job(f"j{j}", rng.choice(MODELS), rng.choice((16, 32, 64)), rng.uniform(2e3, 5e4), num_gpus=size,
                  weight=rng.choice((1.0, 1.0, 2.0)), freeze_allowed=True, accuracy_budget=0.05,
                  arrival_time_s=0.0)
        remaining = job.total_iterations * rng.uniform(0.2, 1.0)
        assignment = None
        if rng.random() < running_fraction:
            node = next((n for n, gpus in free.items() if len(gpus) >= size), None)
            if node is not None:
                gpus, free[node] = free[node][:size], free[node][size:]
                assignment = Assignment(job.id, tuple(gpus))
        states.append(JobState(job, remaining, assignment=assignment, queued_since_s=rng.uniform(0, 3000)))
    return ClusterState(3600.0, cluster, tuple(states))


#: the stages of a round, in order, as ``bench solve`` reports them (seconds); ``round_total_s`` is their sum
#: as measured end to end: snapshot in, checked plan out
STAGES = ("round_build_s", "candidates_s", "start_s", "model_build_s", "solve_s", "mapping_s", "check_s",
          "round_total_s")


@dataclass(frozen=True, slots=True)
class BenchRow:
    """Figures of one (size, backend) over repeats: per stage (:data:`STAGES`) the median, least and most
    seconds; the first repeat's total (its predictions not yet memoised); the process's peak RSS after the
    row (a high-water mark: an upper bound on the row's own); the last repeat's gap, status and objective."""

    size: str
    backend: str
    num_candidates: int
    median: dict[str, float]
    least: dict[str, float]
    most: dict[str, float]
    first_round_total_s: float
    peak_rss_mib: float
    gap: float | None
    status: str
    objective: float | None

    @property
    def round_build_time_s(self) -> float:
        """Median seconds to build the round problem (predictions and candidates)."""
        return self.median["round_build_s"]

    @property
    def build_time_s(self) -> float:
        """Candidates, start and model (the plan's ``build_time_s``)."""
        return self.median["candidates_s"] + self.median["start_s"] + self.median["model_build_s"]

    @property
    def solve_time_s(self) -> float:
        """Median seconds the backend took to solve."""
        return self.median["solve_s"]


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (MiB)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024**2 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def bench_size(size: str, backends: tuple[str, ...], predictors: Predictors, repeats: int,
               time_limit_s: float, options: RoundOptions, milp_solver: str | None = None) -> list[BenchRow]:
    """Decide the synthetic round of ``size`` ``repeats`` times per backend, timing every stage of the round
    from the snapshot to the checked plan (:data:`STAGES`); each plan must pass the checker. Predictions are
    memoised across a backend's repeats, as the optimizing policy keeps them across rounds (its first round
    pays them: ``first_round_total_s``). A tiny round solved first loads the backend's solver, as in a
    running scheduler; each round runs with the cyclic garbage collector paused, as in the round pipeline
    (:mod:`~dltsched.formulations.gcpause`). ``milp_solver``: the ``milp`` backend's solver (``highspy``: HiGHS without Pyomo; its
    rows are named ``milp:highspy``)."""
    from dltsched.engine.domain.predictors import memoized
    from dltsched.formulations.checker import check_plan
    from dltsched.formulations.solve import solve_problem

    jobs, gpus = parse_size(size)
    state = synthetic_state(jobs, gpus)
    rows = []
    for backend in backends:
        # solver imported and loaded
        solve_problem(build_round(synthetic_state(4, 8), predictors, options), backend)
        asked = memoized(predictors)  # each backend's first round pays its predictions
        per_stage: dict[str, list[float]] = {stage: [] for stage in STAGES}
        for _ in range(repeats):
            with gc_paused():  # as the round pipeline decides a round
                began = time.perf_counter()
                problem: RoundProblem = build_round(state, asked, options)
                built = time.perf_counter()
                result = solve_problem(problem, backend, time_limit_s=time_limit_s, started_s=began,
                                       solver=milp_solver if backend == "milp" else None)
                solved = time.perf_counter()
                report = check_plan(problem, result.plan)
                done = time.perf_counter()
            if not report.feasible:
                raise RuntimeError(f"{backend} plan for {size} fails the checker: {report.violations[:3]}")
            figures = {"round_build_s": built - began, **result.stages, "check_s": done - solved,
                       "round_total_s": done - began}
            for stage in STAGES:
                per_stage[stage].append(figures.get(stage, 0.0))
        last = result.plan
        name = f"milp:{milp_solver}" if backend == "milp" and milp_solver else backend
        rows.append(BenchRow(size, name, result.num_candidates,
                             {k: statistics.median(v) for k, v in per_stage.items()},
                             {k: min(v) for k, v in per_stage.items()},
                             {k: max(v) for k, v in per_stage.items()}, per_stage["round_total_s"][0],
                             peak_rss_mib(), last.gap, last.status, last.objective))
    return rows


def winners(rows: list[BenchRow], minimize: bool = False) -> dict[str, str]:
    """Per size, the backend with the best objective (ties: the faster round)."""
    out: dict[str, str] = {}
    for size in dict.fromkeys(r.size for r in rows):
        mine = [r for r in rows if r.size == size and r.objective is not None]
        if mine:
            best = max(mine, key=lambda r: (round((-1 if minimize else 1) * (r.objective or 0.0), 6),
                                            -r.median["round_total_s"]))
            out[size] = best.backend
    return out


def rows_as_dicts(rows: list[BenchRow], winner: dict[str, str]) -> list[dict[str, Any]]:
    """The rows as JSON-ready dicts, each marked whether its backend was the fastest for its size.

    Parameters
    ----------
    rows
        The measured rows.
    winner
        Size -> the fastest backend.

    Returns
    -------
    list[dict[str, Any]]
        One dict a row (timings in seconds, memory in MiB).
    """
    return [{"size": r.size, "backend": r.backend, "num_candidates": r.num_candidates,
             "round_build_time_s": r.round_build_time_s, "build_time_s": r.build_time_s,
             "solve_time_s": r.solve_time_s, **{stage: r.median[stage] for stage in STAGES},
             "min": dict(r.least), "max": dict(r.most), "first_round_total_s": r.first_round_total_s,
             "peak_rss_mib": r.peak_rss_mib, "gap": r.gap, "status": r.status, "objective": r.objective,
             "winner": winner.get(r.size) == r.backend} for r in rows]
