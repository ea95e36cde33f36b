"""Solver-independent checker: feasibility of a concrete plan and its objective, from the round alone.

Rules: every placed job is known and placeable, gets exactly ``num_gpus`` GPUs, none of them down,
of one allowed type at an allowed freeze level, in one node whenever a node of that type is large
enough; jobs sharing a GPU share all their GPUs, are at most ``max_jobs_per_gpu`` and form an allowed
group; per GPU the members' memory at their freeze levels plus the group's overhead fits.

Objective (see ``RoundOptions``): ``effective_progress`` = sum of weight x co-located speed x
effective rate / reference rate, plus starvation bonuses, minus migration penalties (a running job
whose GPUs change, or that is left out: :meth:`RoundProblem.migration_cost`); ``jct`` = the same with
each job's term (co-located speeds as :meth:`RoundProblem.value_speeds` credits them) and migration cost
scaled by :meth:`RoundProblem.value_scale` (the round's median, or ``RoundOptions.value_reference_s``, over
the job's own predicted remaining time); ``weighted_completion`` = sum of weight x predicted completion time
(multi-stage for co-located jobs; a job left out waits one round, then runs alone), plus penalties, minus
bonuses; ``makespan`` = the latest predicted completion, plus penalties, minus bonuses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from dltsched.engine.domain.errors import InvalidPlanError
from dltsched.engine.domain.model import Objective, Plan
from dltsched.formulations.interference import simulate_stages
from dltsched.formulations.problem import JobOption, RoundProblem


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Whether a plan is feasible, what it breaks, and its objective (``None`` when infeasible)."""

    feasible: bool
    violations: tuple[str, ...]
    objective: float | None


def check_plan(problem: RoundProblem, plan: Plan) -> CheckReport:
    """Check ``plan`` against ``problem`` and re-compute its objective."""
    violations = _violations(problem, plan)
    if violations:
        return CheckReport(False, tuple(violations), None)
    return CheckReport(True, (), _objective(problem, plan))


def evaluate_objective(problem: RoundProblem, plan: Plan) -> float:
    """The objective of a feasible ``plan``; raises :class:`InvalidPlanError` naming the violations."""
    report = check_plan(problem, plan)
    if report.objective is None:
        raise InvalidPlanError("; ".join(report.violations))
    return report.objective


def _gpu_layout(problem: RoundProblem) -> tuple[list[int], list[str]]:
    node_of: list[int] = []
    for n, node in enumerate(problem.nodes):
        node_of += [n] * node.num_gpus
    return node_of, [problem.nodes[n].gpu_type for n in node_of]


def _violations(problem: RoundProblem, plan: Plan) -> list[str]:
    index = problem.job_index()
    node_of, type_of = _gpu_layout(problem)
    down_gpus = problem.down_gpus()
    num_gpus = problem.num_gpus
    out: list[str] = []
    on_gpu: dict[int, list[int]] = defaultdict(list)
    for a in plan.assignments:
        if a.job_id not in index:
            out.append(f"job '{a.job_id}': not a placeable job of this round")
            continue
        j = index[a.job_id]
        job = problem.jobs[j]
        if any(not 0 <= g < num_gpus for g in a.gpus):
            out.append(f"job '{a.job_id}': GPUs {a.gpus} outside 0..{num_gpus - 1}")
            continue
        if len(a.gpus) != job.num_gpus:
            out.append(f"job '{a.job_id}': {len(a.gpus)} GPUs given, gang needs {job.num_gpus}")
        if down := sorted(down_gpus.intersection(a.gpus)):
            out.append(f"job '{a.job_id}': placed on down GPU(s) {down}")
        types = {type_of[g] for g in a.gpus}
        if len(types) > 1:
            out.append(f"job '{a.job_id}': mixes GPU types {sorted(types)}")
            continue
        gpu_type = types.pop()
        option = problem.option(j, gpu_type, a.freeze_level)
        if option is None:
            out.append(f"job '{a.job_id}': {gpu_type} at freeze level {a.freeze_level} not allowed")
        nodes = {node_of[g] for g in a.gpus}
        if len(nodes) > 1 and (problem.max_node_gpus(gpu_type) >= job.num_gpus
                               or (option is not None and option.cross_step_time_s is None)):
            out.append(f"job '{a.job_id}': split over nodes {sorted(nodes)} though one "
                       f"{gpu_type} node fits it")
        for g in a.gpus:
            on_gpu[g].append(j)
    if not out:
        out += _sharing_violations(problem, plan, on_gpu, type_of)
    return out


def _sharing_violations(problem: RoundProblem, plan: Plan, on_gpu: dict[int, list[int]],
                        type_of: list[str]) -> list[str]:
    index = problem.job_index()
    gpus_of = {index[a.job_id]: tuple(sorted(a.gpus)) for a in plan.assignments}
    level_of = {index[a.job_id]: a.freeze_level for a in plan.assignments}
    out = []
    for g, members in sorted(on_gpu.items()):
        names = [problem.jobs[j].id for j in members]
        if len({gpus_of[j] for j in members}) > 1:
            out.append(f"GPU {g}: jobs {names} share it but not all their GPUs")
            continue
        if len(members) > problem.options.max_jobs_per_gpu:
            out.append(f"GPU {g}: {len(members)} jobs, at most {problem.options.max_jobs_per_gpu} allowed")
            continue
        overhead = 0.0
        if len(members) > 1:
            group = problem.group(tuple(sorted(members)), type_of[g])
            if group is None or not group.allowed:
                out.append(f"GPU {g}: jobs {names} are not an allowed co-location group on {type_of[g]}")
                continue
            overhead = group.overhead_mib
        memory = overhead + sum(_option(problem, j, type_of[g], level_of[j]).memory_mib for j in members)
        limit = next(n.memory_mib for n in problem.nodes if n.gpu_type == type_of[g])
        if memory > limit * (1 + 1e-9):
            out.append(f"GPU {g}: jobs {names} need {memory:.0f} MiB, {limit:.0f} MiB available")
    return out


def _objective(problem: RoundProblem, plan: Plan) -> float:
    index = problem.job_index()
    node_of, type_of = _gpu_layout(problem)
    options = problem.options
    units: dict[tuple[int, ...], list[tuple[int, int]]] = defaultdict(list)
    for a in plan.assignments:
        units[tuple(sorted(a.gpus))].append((index[a.job_id], a.freeze_level))
    finish = [options.round_s + job.remaining_iterations / job.reference_rate for job in problem.jobs]
    progress = 0.0
    for gpus, placed in units.items():
        members = tuple(sorted(j for j, _ in placed))
        level = dict(placed)
        gpu_type = type_of[gpus[0]]
        cross = len({node_of[g] for g in gpus}) > 1
        rates = [_option(problem, j, gpu_type, level[j]).rate(cross) for j in members]
        speeds = _speeds(problem, members, gpu_type)
        group = problem.group(members, gpu_type) if len(members) > 1 else None
        credited = problem.value_speeds(group) if group is not None else speeds(tuple(range(len(members))))
        for j, s, r in zip(members, credited, rates, strict=True):
            job = problem.jobs[j]
            progress += job.weight * s * r / job.reference_rate * problem.value_scale(j)
        if options.minimize:
            done = simulate_stages([problem.jobs[j].remaining_iterations for j in members], rates, speeds)
            for j, c in zip(members, done.completion_s, strict=True):
                finish[j] = c
    placed_jobs = {index[a.job_id] for a in plan.assignments}
    current = {index[a.job_id]: tuple(sorted(a.gpus)) for a in plan.assignments}
    moved = [j for j, job in enumerate(problem.jobs) if job.running and current.get(j) != job.current_gpus]
    bonus = sum(options.starvation_weight * problem.jobs[j].age_s / 3600.0 for j in placed_jobs)
    penalty = sum(problem.migration_cost(j) for j in moved)
    if not options.minimize:
        return progress + bonus - penalty
    if options.objective is Objective.WEIGHTED_COMPLETION:
        return sum(job.weight * f for job, f in zip(problem.jobs, finish, strict=True)) + penalty - bonus
    return max(finish, default=0.0) + penalty - bonus


def _option(problem: RoundProblem, job: int, gpu_type: str, level: int) -> JobOption:
    """The job's option at ``level`` on ``gpu_type``; the feasibility checks ran first, so it exists."""
    option = problem.option(job, gpu_type, level)
    if option is None:
        raise InvalidPlanError(f"job '{problem.jobs[job].id}' has no option at freeze level {level} on "
                               f"{gpu_type}")
    return option


def _speeds(problem: RoundProblem, members: tuple[int, ...],
            gpu_type: str) -> Callable[[tuple[int, ...]], list[float]]:
    def speeds(active: tuple[int, ...]) -> list[float]:
        if len(active) == 1:
            return [1.0]
        jobs = tuple(members[a] for a in active)
        group = problem.group(jobs, gpu_type)
        if group is None:
            raise InvalidPlanError(f"no co-location speeds for jobs {jobs} on {gpu_type}")
        return [group.speeds[group.jobs.index(j)] for j in jobs]

    return speeds
