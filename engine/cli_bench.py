"""``dltsched bench``: benchmarks that report numbers (simulation speed here; solve and predict mounted)."""

from __future__ import annotations

import time
from typing import Any

import click

from dltsched.engine.cli import LazyGroup, emit
from dltsched.engine.cli_simulate import load_instance_or_workload, run_policies

_BENCH_COMMANDS = {
    "solve": "dltsched.formulations.cli:bench_solve",
    "predict": "dltsched.predictors.cli:bench_predict",
}


@click.group("bench", cls=LazyGroup, lazy=_BENCH_COMMANDS)
def bench() -> None:
    """Benchmarks: simulation, solver and predictor speed."""


@bench.command("simulate")
@click.option("--instance", "instance_path", type=click.Path(dir_okay=False), help="Instance JSON file.")
@click.option("--workload", help="A real workload (e.g. philly).")
@click.option("--data-dir", type=click.Path(file_okay=False))
@click.option("--cluster", help="Cluster for --workload, e.g. 'v100:8x8,p100:4x8,k80:4x8'.")
@click.option("--jobs", type=click.IntRange(min=1), help="First N jobs of --workload.")
@click.option("--policy", "policies", multiple=True, default=("fifo",), show_default=True)
@click.option("--predictors", "predictor_set", default="default", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def bench_simulate(instance_path: str | None, workload: str | None, data_dir: str | None, cluster: str | None,
                   jobs: int | None, policies: tuple[str, ...], predictor_set: str, seed: int, as_json: bool) -> None:
    """Time loading and simulating a workload under each policy; one row per policy."""
    t0 = time.perf_counter()
    inst = load_instance_or_workload(instance_path, workload, data_dir=data_dir, cluster=cluster, jobs=jobs, seed=seed)
    load_s = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    for name in policies:
        t1 = time.perf_counter()
        (res,) = run_policies(inst, [name], seed=seed, predictor_set=predictor_set, memory="oom", data_dir=data_dir)
        rows.append({
            "policy": res.policy, "num_jobs": res.num_jobs, "num_gpus": inst.cluster.num_gpus,
            "load_s": round(load_s, 3), "simulate_s": round(time.perf_counter() - t1, 3),
            "avg_jct_s": res.avg_jct_s, "p99_jct_s": res.p99_jct_s, "makespan_s": res.makespan_s,
            "gpu_util": res.gpu_util, "num_jobs_finished": res.num_jobs_finished, "num_rounds": res.num_rounds,
            "decision_time_mean_s": res.decision_time_mean_s,
        })

    def human() -> None:
        for r in rows:
            click.echo(f"{r['policy']}: {r['num_jobs']} jobs on {r['num_gpus']} GPUs, load {r['load_s']:.2f} s, "
                       f"simulate {r['simulate_s']:.2f} s, {r['num_rounds']} rounds")

    emit(rows, as_json, human)
