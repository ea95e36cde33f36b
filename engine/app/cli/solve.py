"""``dltsched solve`` and ``dltsched bench solve``.

``solve`` reads a round JSON (written by ``RoundProblem.save``) or an instance JSON; an instance
becomes the round at time 0 with every job queued, coefficients from the ``--predictors`` bundle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dltsched.engine.app.cli.main import FiniteFloat
from dltsched.engine.domain.errors import InfeasibleRoundError, ValidationError, write_text_file
from dltsched.engine.domain.model import DEFAULT_OBJECTIVE
from dltsched.formulations.backends import BACKENDS, EXACT_BACKENDS
from dltsched.formulations.problem import FORMAT, OBJECTIVES, RoundOptions, RoundProblem


def load_round(path: Path, options: RoundOptions, predictors_name: str) -> RoundProblem:
    """A round from a round JSON, or the time-0 round (all jobs queued) of an instance JSON."""
    from dltsched.engine.domain.errors import ValidationError
    from dltsched.engine.domain.limits import read_limited

    raw = read_limited(path, str(path)).decode("utf-8")
    try:
        from dltsched.instances.schema import parse_json_text

        data = parse_json_text(raw, str(path))
    except ImportError:
        data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValidationError(str(path), f"top level is {type(data).__name__}; a round or instance is a JSON object")
    if data.get("format") == FORMAT:
        try:
            return RoundProblem.from_dict(data)
        except (KeyError, TypeError, IndexError, AttributeError) as err:
            raise ValidationError(str(path), f"not a valid round JSON ({type(err).__name__}: {err}); write "
                                  "rounds with 'solve --save-round'") from None
    try:
        from dltsched.instances.schema import load_instance
    except ImportError:
        raise ValueError(f"{path}: not a round JSON ('format': '{FORMAT}') and the instance reader "
                         "dltsched.instances.schema is not available") from None
    from dltsched.engine.app.registry import predictors
    from dltsched.engine.domain.model import ClusterState, JobState
    from dltsched.formulations.build import build_round

    instance = load_instance(data)
    state = ClusterState(0.0, instance.cluster,
                         tuple(JobState(job, job.total_iterations, queued_since_s=job.arrival_time_s)
                               for job in instance.jobs))
    return build_round(state, predictors(predictors_name), options)


@click.command("solve")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="cpsat", show_default=True)
@click.option("--solver", default=None, help="Pyomo solver for --backend milp (default HiGHS).")
@click.option("--time-limit", "time_limit_s", type=FiniteFloat(0.0, 86_400.0, min_open=True), default=10.0,
              show_default=True, help="Seconds (at most one day).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=DEFAULT_OBJECTIVE, show_default=True,
              help="For instance files (a round JSON carries its own options).")
@click.option("--max-jobs-per-gpu", type=click.IntRange(1, 3), default=2, show_default=True)
@click.option("--predictors", "predictors_name", default="default", show_default=True)
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="A calibration bundle (dltsched calibrate): the GPU types it covers are priced by it "
                   "(CAL.json:mps: co-location under MPS).")
@click.option("--save-round", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the round as JSON (to re-solve or share).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def solve(path: Path, backend: str, solver: str | None, time_limit_s: float, objective: str,
          max_jobs_per_gpu: int, predictors_name: str, calibration: str | None, save_round: Path | None,
          as_json: bool) -> None:
    """Solve one round (ROUND_OR_INSTANCE.json) and print the checked plan."""
    from dltsched.engine.app.cli.main import emit
    from dltsched.engine.app.registry import bundle_fields, check_predictors, with_calibration
    from dltsched.formulations.checker import check_plan
    from dltsched.formulations.solve import solve_problem

    if solver is not None and backend != "milp":
        raise ValidationError("--solver", f"'{solver[:60]}' is for --backend milp only; leave it out or add --backend milp")
    options = RoundOptions(objective=objective, max_jobs_per_gpu=max_jobs_per_gpu, time_limit_s=time_limit_s)
    predictors_name = check_predictors(with_calibration(predictors_name, calibration))
    problem = load_round(path, options, predictors_name)
    if save_round is not None:
        write_text_file(save_round, problem.to_json(), option="--save-round")
    result = solve_problem(problem, backend, time_limit_s=time_limit_s, solver=solver)
    payload = result.to_dict()
    if "@" in predictors_name:  # a calibration priced the round: say which
        payload |= bundle_fields(predictors_name)
    report = check_plan(problem, result.plan)
    payload["checked"] = {"feasible": report.feasible, "objective": report.objective,
                          "violations": list(report.violations)}
    emit(payload, as_json, lambda: _print_result(payload))
    if result.infeasible_jobs:
        raise InfeasibleRoundError(result.plan.message, tuple(u.job_id for u in result.infeasible_jobs))


def _print_result(payload: dict[str, Any]) -> None:
    click.echo(f"{payload['backend']}: {payload['status']}  objective={payload['objective']}  "
               f"bound={payload['bound']}  gap={payload['gap']}  build {payload['build_time_s']:.3f}s  "
               f"solve {payload['solve_time_s']:.3f}s")
    for a in payload["assignments"]:
        click.echo(f"  {a['job_id']}: GPUs {a['gpus']} freeze {a['freeze_level']}")
    if payload["message"]:
        click.echo(payload["message"])


@click.command("solve")
@click.option("--sizes", default=",".join(("20x16", "200x256", "1000x1024")), show_default=True,
              help="Comma-separated JOBSxGPUS.")
@click.option("--backend", type=click.Choice([*EXACT_BACKENDS, "both", "decomposed"]), default="both",
              show_default=True, help="An exact backend, both (every exact backend), or decomposed (an LP "
              "relaxation rounded, placed per GPU type when that is not within the gap; its bound is the LP's).")
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
        raise ValidationError("--sizes", f"{sizes[:40]!r} names no size; give JOBSxGPUS sizes, e.g. 20x16,200x256")
    for name in names:
        parse_size(name)
    backends = EXACT_BACKENDS if backend == "both" else (backend,)
    options = RoundOptions(max_jobs_per_gpu=max_jobs_per_gpu, relative_gap=relative_gap, time_limit_s=time_limit_s)
    bundle = predictors(predictors_name)
    solver = None if milp_solver == "highs" else milp_solver
    rows = [row for name in names for row in bench_size(name, backends, bundle, repeats, time_limit_s, options, solver)]
    table = rows_as_dicts(rows, winners(rows, options.minimize))
    emit({"rows": table}, as_json, lambda: _print_bench(table))


def _print_bench(table: list[dict[str, Any]]) -> None:
    from dltsched.formulations.bench import STAGES

    for r in table:
        gap = "unknown" if r["gap"] is None else f"{r['gap']:.4%}"
        click.echo(f"{r['size']:>10} {r['backend']:>6} cands={r['num_candidates']:>7} "
                   f"round_total={r['round_total_s']:.3f}s [{r['min']['round_total_s']:.3f}-"
                   f"{r['max']['round_total_s']:.3f}] first={r['first_round_total_s']:.3f}s "
                   f"peak_rss={r['peak_rss_mib']:.0f}MiB gap={gap} {r['status']}{' *' if r['winner'] else ''}")
        click.echo("           " + " ".join(f"{stage[:-2]}={r[stage]:.3f}" for stage in STAGES[:-1]))
