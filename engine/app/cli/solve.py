"""``dltsched solve`` and ``dltsched bench solve``.

``solve`` reads a round JSON (written by ``RoundProblem.save``) or an instance JSON; an instance
becomes the round at time 0 with every job queued, coefficients from the ``--predictors`` bundle.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.cli.main import BackendName, FiniteFloat
from dltsched.engine.domain.errors import InfeasibleRoundError, ValidationError, write_text_file
from dltsched.engine.domain.model import DEFAULT_OBJECTIVE, ClusterState, Plan
from dltsched.formulations.backends import EXACT_BACKENDS, backend_names
from dltsched.formulations.problem import FORMAT, OBJECTIVES, GpuNode, RoundOptions, RoundProblem


def finite_or_none(value: float | None) -> float | None:
    """``value`` when finite, else ``None`` (JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None


def load_round(path: Path, options: RoundOptions, predictors_name: str) -> RoundProblem:
    """A round from a round JSON, or the time-0 round (all jobs queued) of an instance JSON."""
    return load_round_state(path, options, predictors_name)[0]


def load_round_state(path: Path, options: RoundOptions,
                     predictors_name: str) -> tuple[RoundProblem, ClusterState | None, Any]:
    """:func:`load_round`'s round with, for an instance JSON, the cluster snapshot and the predictor bundle it
    was built from (``None, None`` for a round JSON: it carries its coefficients, not its jobs)."""
    from dltsched.engine.domain.errors import ValidationError
    from dltsched.engine.domain.limits import read_limited

    raw = read_limited(path, str(path)).decode("utf-8")
    try:
        from dltsched.instances.schema import parse_json_text

        data = parse_json_text(raw, str(path))
    except ImportError:
        data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValidationError(str(path),
                              f"top level is {type(data).__name__}; a round or instance is a JSON object")
    if data.get("format") == FORMAT:
        try:
            return RoundProblem.from_dict(data), None, None
        except (KeyError, TypeError, IndexError, AttributeError) as err:
            raise ValidationError(str(path), f"not a valid round JSON ({type(err).__name__}: {err}); write "
                                  "rounds with 'solve --save-round'") from None
    try:
        from dltsched.instances.schema import load_instance
    except ImportError:
        raise ValueError(f"{path}: not a round JSON ('format': '{FORMAT}') and the instance reader "
                         "dltsched.instances.schema is not available") from None
    from dltsched.engine.app.registry import predictors
    from dltsched.engine.domain.model import JobState
    from dltsched.formulations.build import build_round

    instance = load_instance(data)
    state = ClusterState(0.0, instance.cluster,
                         tuple(JobState(job, job.total_iterations, queued_since_s=job.arrival_time_s)
                               for job in instance.jobs))
    bundle = predictors(predictors_name)
    return build_round(state, bundle, options), state, bundle


BACKEND_HELP = ("cpsat | milp (Pyomo -> HiGHS) | greedy (the formulation's heuristic) | "
                "greedy:<policy> (a baseline decides, e.g. greedy:sjf; instance files only) | auto (cpsat up "
                "to 100 jobs, else greedy).")


@click.command("solve")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--backend", type=BackendName(), default="cpsat", show_default=True, help=BACKEND_HELP)
@click.option("--solver", default=None, help="Pyomo solver for --backend pyomo or milp (default HiGHS).")
@click.option("--time-limit", "time_limit_s", type=FiniteFloat(0.0, 86_400.0, min_open=True), default=10.0,
              show_default=True, help="Seconds (at most one day).")
@click.option("--objective", type=click.Choice([str(o) for o in OBJECTIVES]), default=str(DEFAULT_OBJECTIVE),
              show_default=True,
              help="For instance files (a round JSON carries its own options).")
@click.option("--max-jobs-per-gpu", type=click.IntRange(1, 3), default=2, show_default=True)
@click.option("--predictors", "predictors_name", default="default", show_default=True)
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="A calibration bundle (dltsched calibrate): the GPU types it covers are priced by it "
                   "(CAL.json:mps: co-location under MPS).")
@click.option("--save-round", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the round as JSON (to re-solve or share).")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output: the service's plan (assignments with "
              "gpu_type and nodes, colocation_groups, queued, ...) with the solver's figures and the check.")
def solve(path: Path, backend: str, solver: str | None, time_limit_s: float, objective: str,
          max_jobs_per_gpu: int, predictors_name: str, calibration: str | None, save_round: Path | None,
          as_json: bool) -> None:
    """Solve one round (ROUND_OR_INSTANCE.json) and print the checked plan."""
    from dltsched.engine.app.cli.main import emit
    from dltsched.engine.app.registry import bundle_fields, check_predictors, with_calibration
    from dltsched.engine.app.vocabulary import parse_backend
    from dltsched.formulations.checker import check_plan
    from dltsched.formulations.solve import solve_problem

    choice = parse_backend(backend, "--backend")
    if solver is not None and choice.name not in ("pyomo", "milp"):
        raise ValidationError("--solver", f"'{solver[:60]}' is for --backend pyomo (or milp) only; leave it "
                              "out or add --backend pyomo")
    options = RoundOptions(objective=objective, max_jobs_per_gpu=max_jobs_per_gpu, time_limit_s=time_limit_s)
    predictors_name = check_predictors(with_calibration(predictors_name, calibration))
    began = time.perf_counter()
    problem, state, bundle = load_round_state(path, options, predictors_name)
    if save_round is not None:
        write_text_file(save_round, problem.to_json(), option="--save-round")
    if choice.policy is not None:
        if state is None:
            raise ValidationError("--backend",
                                  f"{choice} needs the jobs a policy reads: give an instance file, or "
                                  "use --backend greedy on a round JSON")
        from dltsched.engine.app.api import baseline_plan

        plan = baseline_plan(state, choice.policy, bundle, status="heuristic")
        solver_fields: dict[str, Any] = {"termination": None, "solution_status": None, "num_candidates": None,
                                         "infeasible_jobs": []}
        infeasible: tuple[str, ...] = ()
    else:
        result = solve_problem(problem, choice.for_jobs(len(problem.jobs)), time_limit_s=time_limit_s,
                               solver=solver)
        plan = result.plan
        solver_fields = {k: v for k, v in result.to_dict().items()
                         if k in ("termination", "solution_status", "num_candidates", "infeasible_jobs")}
        infeasible = tuple(u.job_id for u in result.infeasible_jobs)
    report = check_plan(problem, plan)
    if choice.policy is not None and report.objective is not None:  # a policy's plan, valued by the checker
        plan = replace(plan, objective=report.objective)
    payload = plan_payload(plan, problem, wall_time_s=time.perf_counter() - began, time_limit_s=time_limit_s)
    payload |= solver_fields | {"checked": {"feasible": report.feasible, "objective": report.objective,
                                            "violations": list(report.violations)}}
    if "@" in predictors_name:  # a calibration priced the round: say which
        payload |= bundle_fields(predictors_name)
    emit(payload, as_json, lambda: print_plan(payload, problem))
    if infeasible:
        raise InfeasibleRoundError(plan.message, infeasible)


def plan_payload(plan: Plan, problem: RoundProblem, *, wall_time_s: float,
                 time_limit_s: float) -> dict[str, Any]:
    """``plan`` in the shape of the service's answer
    (:class:`~dltsched.engine.app.service.models.ScheduleResponse`: assignments with their GPU type and nodes,
    colocation_groups, queued, ...), for a round's GPUs and jobs."""
    from dltsched.engine.app.service.models import AssignmentOut, ColocationGroupOut, ScheduleResponse

    node_of: dict[int, GpuNode] = {g: node for node in problem.nodes
                                   for g in range(node.first_gpu, node.first_gpu + node.num_gpus)}
    placed = {a.job_id for a in plan.assignments}
    waiting = [j.id for j in problem.jobs if j.id not in placed] + [u.job_id for u in problem.unplaceable
                                                                     if u.job_id not in placed]
    response = ScheduleResponse(
        status=plan.status, backend=plan.backend, fallback=plan.fallback,
        fallback_reason="solver_failed" if plan.fallback else None, time_limit_s=time_limit_s,
                                message=plan.message,
        objective=finite_or_none(plan.objective), bound=finite_or_none(plan.bound),
                                gap=finite_or_none(plan.gap),
        solve_time_s=plan.solve_time_s, build_time_s=plan.build_time_s, wall_time_s=wall_time_s,
        assignments=[AssignmentOut(job_id=a.job_id, gpus=list(a.gpus), gpu_type=node_of[a.gpus[0]].gpu_type,
                                   nodes=sorted({node_of[g].id for g in a.gpus}), freeze_level=a.freeze_level)
                     for a in plan.assignments],
        colocation_groups=[ColocationGroupOut(gpu=g, job_ids=list(js))
                           for g, js in plan.colocation_groups().items() if len(js) > 1],
        queued=list(dict.fromkeys(waiting)), colocation_fallbacks=list(plan.colocation_fallbacks),
        provenance={job: dict(entry) for job, entry in plan.provenance.items()})
    return response.model_dump()


def _number(value: float | None, fmt: str = "{:.4g}") -> str:
    return "n/a" if value is None else fmt.format(value)


def print_plan(payload: dict[str, Any], problem: RoundProblem) -> None:
    """The plan for people: a headline, one row per placed job (GPU type, node, GPUs, freeze level, who shares
    its GPUs), the GPU types and the jobs left waiting."""
    from rich import box
    from rich.table import Table

    from dltsched.engine.app.cli.output import console, print_fitted

    out = console()
    checked = payload["checked"]
    verdict = "feasible" if checked["feasible"] else "VIOLATIONS " + "; ".join(checked["violations"])
    out.print(f"[bold]{payload['backend']}[/]: {payload['status']}  objective "
              f"{_number(payload['objective'])}  "
              f"bound {_number(payload['bound'])}  gap {_number(payload['gap'], '{:.2%}')}  "
              f"build {payload['build_time_s']:.3f} s  solve {payload['solve_time_s']:.3f} s  "
              f"checked: {verdict}",
              highlight=False)
    types: dict[str, int] = {}
    for node in problem.nodes:
        types[node.gpu_type] = types.get(node.gpu_type, 0) + node.num_gpus - len(node.down_gpus)
    total = len(problem.jobs) + len(problem.unplaceable)
    out.print(f"{len(payload['assignments'])} of {total} jobs placed on GPU types "
              + ", ".join(f"{t} ({n} GPUs)" for t, n in types.items()), highlight=False)
    partners: dict[str, set[str]] = {}
    for group in payload["colocation_groups"]:
        for job in group["job_ids"]:
            partners.setdefault(job, set()).update(j for j in group["job_ids"] if j != job)
    if payload["assignments"]:
        rows = [[a["job_id"], a["gpu_type"], ",".join(a["nodes"]), _gpu_ranges(a["gpus"]),
                 str(a["freeze_level"]), ", ".join(sorted(partners.get(a["job_id"], ()))) or "-"]
                for a in payload["assignments"]]
        print_fitted(out, lambda: Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False,
                                        collapse_padding=True),
                     ("job", "GPU type", "node", "GPUs", "freeze", "shares GPUs with"), rows,
                     priority=(0, 1, 3, 5, 4, 2))
    groups = payload["colocation_groups"]
    if groups:
        out.print(f"co-located on {len(groups)} GPU(s): " + "; ".join(
            f"GPU {g['gpu']}: {' + '.join(g['job_ids'])}" for g in groups), highlight=False)
    queued = payload["queued"]
    out.print(f"queued ({len(queued)}): {', '.join(queued) if queued else 'none'}", highlight=False)
    if payload["message"]:
        out.print(payload["message"], highlight=False, markup=False)


def _gpu_ranges(gpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``."""
    runs: list[list[int]] = []
    for g in sorted(gpus):
        if runs and runs[-1][1] == g - 1:
            runs[-1][1] = g
        else:
            runs.append([g, g])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@click.command("solve")
@click.option("--sizes", default=",".join(("20x16", "200x256", "1000x1024")), show_default=True,
              help="Comma-separated JOBSxGPUS.")
@click.option("--backend", type=click.Choice([*backend_names(exact=True), "both", "decomposed"]),
              default="both",
              show_default=True, help="An exact backend, both (every exact backend), or decomposed (an LP "
              "relaxation rounded, placed per GPU type when that is not within the gap; its "
              "bound is the LP's).")
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("--time-limit", "time_limit_s", type=FiniteFloat(0.0, 86_400.0, min_open=True), default=10.0,
              show_default=True)
@click.option("--gap", "relative_gap", type=FiniteFloat(0.0, 1.0), default=0.02, show_default=True,
              help="Relative gap limit.")
@click.option("--max-jobs-per-gpu", type=click.IntRange(1, 3), default=2, show_default=True)
@click.option("--predictors", "predictors_name", default="analytic", show_default=True)
@click.option("--milp-solver", type=click.Choice(["highs", "highspy"]), default="highs", show_default=True,
              help="HiGHS for --backend milp through Pyomo (highs) or fed the matrix directly (highspy).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def bench_solve(sizes: str, backend: str, repeats: int, time_limit_s: float, relative_gap: float,
                max_jobs_per_gpu: int, predictors_name: str, milp_solver: str, as_json: bool) -> None:
    """Decide synthetic rounds of each size: per stage of the round (round build, candidates, start, model
    build, solve, mapping, check) and in all (round_total_s) the median and range over repeats, peak RSS,
    gap, status, winner."""
    from dltsched.engine.app.cli.main import emit
    from dltsched.engine.app.registry import predictors
    from dltsched.formulations.bench import bench_size, parse_size, rows_as_dicts, winners

    names = [s.strip() for s in sizes.split(",") if s.strip()]
    if not names:
        raise ValidationError("--sizes",
                              f"{sizes[:40]!r} names no size; give JOBSxGPUS sizes, e.g. 20x16,200x256")
    for name in names:
        parse_size(name)
    backends = EXACT_BACKENDS if backend == "both" else (backend,)
    options = RoundOptions(max_jobs_per_gpu=max_jobs_per_gpu, relative_gap=relative_gap,
                           time_limit_s=time_limit_s)
    bundle = predictors(predictors_name)
    solver = None if milp_solver == "highs" else milp_solver
    rows = [row for name in names
            for row in bench_size(name, backends, bundle, repeats, time_limit_s, options, solver)]
    table = rows_as_dicts(rows, winners(rows, options.minimize))
    emit({"rows": table}, as_json, lambda: _print_bench(table))


def _print_bench(table: list[dict[str, Any]]) -> None:
    from dltsched.formulations.bench import STAGES

    for r in table:
        gap = "unknown" if r["gap"] is None else f"{r['gap']:.4%}"
        click.echo(f"{r['size']:>10} {r['backend']:>6} cands={r['num_candidates']:>7} "
                   f"round_total={r['round_total_s']:.3f}s [{r['min']['round_total_s']:.3f}-"
                   f"{r['max']['round_total_s']:.3f}] first={r['first_round_total_s']:.3f}s "
                   f"peak_rss={r['peak_rss_mib']:.0f}MiB gap={gap} {r['status']}"
                   f"{' *' if r['winner'] else ''}")
        click.echo("           " + " ".join(f"{stage[:-2]}={r[stage]:.3f}" for stage in STAGES[:-1]))
