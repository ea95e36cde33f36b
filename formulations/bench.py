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
from dltsched.formulations.problem import RoundOptions, RoundProblem

GPU_TYPES = ("v100", "a100-40gb", "h100")
MODELS = ("resnet18", "resnet50", "vgg16", "mobilenet_v2", "bert_base", "transformer", "lstm_lm", "dcgan",
          "neumf", "pointnet", "a3c", "shufflenet_v2")
DEFAULT_SIZES = ("20x16", "200x256", "1000x1024")


def parse_size(text: str) -> tuple[int, int]:
    try:
        jobs, gpus = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"sizes: '{text}' not understood; write JOBSxGPUS, e.g. 200x256") from None
    if jobs < 1 or gpus < 8 or gpus % 8:
        raise ValueError(f"sizes: '{text}' not understood; >= 1 job and a multiple of 8 GPUs")
    return jobs, gpus


def synthetic_state(num_jobs: int, num_gpus: int, seed: int = 0, running_fraction: float = 0.5) -> ClusterState:
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


@dataclass(frozen=True, slots=True)
class BenchRow:
    """Figures of one (size, backend): medians over repeats."""

    size: str
    backend: str
    num_candidates: int
    round_build_time_s: float
    build_time_s: float
    solve_time_s: float
    gap: float | None
    status: str
    objective: float | None


def bench_size(size: str, backends: tuple[str, ...], predictors: Predictors, repeats: int, time_limit_s: float,
               options: RoundOptions) -> list[BenchRow]:
    """Solve the synthetic round of ``size`` ``repeats`` times per backend (checked each time)."""
    from dltsched.formulations.checker import check_plan
    from dltsched.formulations.solve import solve_problem

    jobs, gpus = parse_size(size)
    start = time.perf_counter()
    problem: RoundProblem = build_round(synthetic_state(jobs, gpus), predictors, options)
    round_build_s = time.perf_counter() - start
    rows = []
    for backend in backends:
        results = [solve_problem(problem, backend, time_limit_s=time_limit_s) for _ in range(repeats)]
        for result in results:
            report = check_plan(problem, result.plan)
            if not report.feasible:
                raise RuntimeError(f"{backend} plan for {size} fails the checker: {report.violations[:3]}")
        last = results[-1].plan
        rows.append(BenchRow(size, backend, results[-1].num_candidates, round_build_s,
                             statistics.median(r.plan.build_time_s for r in results),
                             statistics.median(r.plan.solve_time_s for r in results),
                             last.gap, last.status, last.objective))
    return rows


def winners(rows: list[BenchRow], minimize: bool = False) -> dict[str, str]:
    """Per size, the backend with the best objective (ties: the faster build + solve)."""
    out: dict[str, str] = {}
    for size in dict.fromkeys(r.size for r in rows):
        mine = [r for r in rows if r.size == size and r.objective is not None]
        if mine:
            best = max(mine, key=lambda r: (round((-1 if minimize else 1) * (r.objective or 0.0), 6),
                                            -(r.build_time_s + r.solve_time_s)))
            out[size] = best.backend
    return out


def rows_as_dicts(rows: list[BenchRow], winner: dict[str, str]) -> list[dict[str, Any]]:
    return [{"size": r.size, "backend": r.backend, "num_candidates": r.num_candidates,
             "round_build_time_s": r.round_build_time_s, "build_time_s": r.build_time_s,
             "solve_time_s": r.solve_time_s, "gap": r.gap, "status": r.status, "objective": r.objective,
             "winner": winner.get(r.size) == r.backend} for r in rows]
