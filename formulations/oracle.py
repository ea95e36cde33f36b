"""Brute-force oracle for tiny rounds: enumerate concrete plans, keep the best the checker accepts.

Independent of the candidate model: it walks job by job over "left out" and every GPU subset x
freeze level, prunes partial plans that break sharing rules, and scores complete plans with the
checker. Interchangeable GPUs (same node, empty so far, nobody's current GPU) are tried once.
Meant for <= 6 jobs and <= 4 GPUs.
"""

from __future__ import annotations

from itertools import combinations

from dltsched.engine.domain.model import Assignment, Plan
from dltsched.formulations.checker import check_plan
from dltsched.formulations.problem import RoundProblem

MAX_JOBS = 6
MAX_GPUS = 4


def brute_force(problem: RoundProblem) -> tuple[float, Plan]:
    """The optimal objective and one optimal plan of a tiny round."""
    if len(problem.jobs) > MAX_JOBS or problem.num_gpus > MAX_GPUS:
        raise ValueError(f"round: {len(problem.jobs)} jobs / {problem.num_gpus} GPUs is too big for the "
                         f"oracle; at most {MAX_JOBS} jobs and {MAX_GPUS} GPUs")
    node_of = [n for n, node in enumerate(problem.nodes) for _ in range(node.num_gpus)]
    pinned = {g for job in problem.jobs for g in job.current_gpus}
    down = problem.down_gpus()
    sign = -1.0 if problem.options.minimize else 1.0
    best: list[tuple[float, Plan]] = []
    occupant: dict[int, tuple[int, ...]] = {}
    load = [0] * problem.num_gpus
    chosen: list[Assignment] = []

    def canonical(gpus: tuple[int, ...]) -> bool:
        for n in {node_of[g] for g in gpus}:
            fresh = [g for g in problem.nodes[n].up_gpus() if load[g] == 0 and g not in pinned]
            used = [g for g in gpus if g in fresh]
            if used != fresh[: len(used)]:
                return False
        return True

    def walk(j: int) -> None:
        if j == len(problem.jobs):
            plan = Plan(tuple(chosen))
            report = check_plan(problem, plan)
            if report.objective is not None and (not best or sign * report.objective > sign * best[0][0]):
                best[:] = [(report.objective, plan)]
            return
        walk(j + 1)
        job = problem.jobs[j]
        for option in job.options:
            gpus_of_type = [g for g in range(problem.num_gpus)
                            if problem.nodes[node_of[g]].gpu_type == option.gpu_type and g not in down]
            for gpus in combinations(gpus_of_type, job.num_gpus):
                if not canonical(gpus) or any(load[g] and occupant[g] != gpus for g in gpus):
                    continue
                if any(load[g] >= problem.options.max_jobs_per_gpu for g in gpus):
                    continue
                for g in gpus:
                    load[g] += 1
                    occupant[g] = gpus
                chosen.append(Assignment(job.id, gpus, option.freeze_level))
                walk(j + 1)
                chosen.pop()
                for g in gpus:
                    load[g] -= 1

    walk(0)
    return best[0]
