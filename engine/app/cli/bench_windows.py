"""``dltsched bench windows``: the optimizing policy's simulation cost on held-out Philly windows, as ratios.

Each window is simulated with the optimizing policy and the references (Tiresias and the Gavel LP policy) in
the same process, one after the other, so that the ratios compare runs of the same machine load (wall-clock
seconds, and this process's CPU seconds, which a loaded machine disturbs less). The predictor
bundle is loaded once per window before any policy is timed (every policy shares it); each policy's time is
its simulation alone, its own imports included on its first window.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace
from typing import Any

import click

from dltsched.engine.app.cli.main import emit

#: the reference policies the optimizing policy's time is compared with
REFERENCES = ("tiresias", "gavel")


@dataclass(frozen=True, slots=True)
class Window:
    """A window of the Philly trace: ``jobs`` jobs from ``start_s`` on ``gpus`` GPUs, models drawn by
    ``seed``."""

    name: str
    start_s: float
    jobs: int
    gpus: int
    seed: int


#: windows chosen before any measurement and never used to tune (see docs/speed.md)
HELD_OUT = (Window("w1", 1_000_000, 500, 64, 41), Window("w2", 2_500_000, 700, 128, 42),
            Window("w3", 4_000_000, 1_000, 256, 43), Window("w4", 5_500_000, 600, 64, 44),
            Window("w5", 7_500_000, 800, 192, 45))
#: the window the speed work was tuned on (not held out)
TUNING = Window("tuning", 9_000_000, 500, 64, 31)
#: the other windows choices are made on (not held out; see docs/speed.md): a burst, a larger cluster
TUNING_MORE = (Window("t2", 8_200_000, 400, 128, 52), Window("t3", 8_600_000, 600, 192, 54),
               Window("t4", 3_000_000, 700, 128, 56), Window("t5", 6_500_000, 900, 256, 57))
WINDOWS = {w.name: w for w in (*HELD_OUT, TUNING, *TUNING_MORE)}


def add_window_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Add the flags that give a window (``--start-s``, ``--jobs``, ``--gpus``, ``--seed``) to ``parser``,
    for scripts that simulate one window of the trace; :func:`window_of` reads them back."""
    parser.add_argument("--start-s", type=float, required=required)
    parser.add_argument("--jobs", type=int, required=required)
    parser.add_argument("--gpus", type=int, required=required)
    parser.add_argument("--seed", type=int, required=required)


def window_of(args: argparse.Namespace) -> Window:
    """The window the flags of :func:`add_window_arguments` give."""
    return Window("window", args.start_s, args.jobs, args.gpus, args.seed)


def window_instance(window: Window, data_dir: str | None) -> Any:
    """The Philly jobs of ``window`` on its cluster (an ``Instance``)."""
    from dltsched.engine.app.cli.simulate import load_instance_or_workload

    return load_instance_or_workload(None, "philly", data_dir=data_dir, cluster=None, jobs=window.jobs,
                                     seed=window.seed, gpus=window.gpus, start_s=window.start_s)


def window_policy(name: str, window: Window, *, bundle: str, data_dir: str | None,
                  options: dict[str, Any] | None = None) -> tuple[Any, Any, Any]:
    """What one simulation of a window runs with: ``(policy, truth, config)`` for
    ``simulate(instance, policy, truth=truth, config=config)``. The policy sees the ``bundle``'s predictions
    (no added error), the truth is the measured one, and memory is learned after an out-of-memory crash."""
    from dltsched.engine.app.cli.simulate import simulation_setup
    from dltsched.engine.app.registry import make_policy, predictors
    from dltsched.engine.sim.truth import MeasuredTruth
    from dltsched.predictors.noise import with_prediction_error

    preds, config = simulation_setup(with_prediction_error(predictors(bundle, data_dir), 0.0, window.seed),
                                     seed=window.seed, memory="oom")
    return make_policy(name, predictors=preds, **(options or {})), MeasuredTruth(data_dir=data_dir), config


def run_window(window: Window, policies: tuple[str, ...], *, bundle: str, data_dir: str | None,
               options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Simulate ``policies`` on ``window``; per policy its seconds, rounds, solves and metrics."""
    from dltsched.engine.app.registry import predictors
    from dltsched.engine.sim.simulator import simulate

    began = time.perf_counter()
    inst = window_instance(window, data_dir)
    predictors(bundle, data_dir)  # loaded once, shared by every policy (cached)
    row: dict[str, Any] = {"window": window.name, "start_s": window.start_s, "num_jobs": len(inst.jobs),
                           "num_gpus": inst.cluster.num_gpus, "seed": window.seed, "bundle": bundle,
                           "load_s": time.perf_counter() - began}
    for name in policies:
        policy, truth, config = window_policy(name, window, bundle=bundle, data_dir=data_dir,
                                              options=options.get(name))
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(inst, policy, truth=truth, config=config)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        log = getattr(policy, "solve_log", ())
        solves = len(log)
        row[name] = {"simulate_s": seconds, "cpu_s": cpu, "num_rounds": result.num_rounds, "solves": solves,
                     "ms_per_round": 1e3 * seconds / max(1, result.num_rounds),
                     "solver_s": sum(float(e.get("solve_time_s") or 0.0) for e in log),
                     "avg_jct_s": result.avg_jct_s, "makespan_s": result.makespan_s,
                     "num_jobs_finished": len(result.records)}
    if "optimizing" in row:
        for ref in policies:
            if ref != "optimizing":
                row[f"optimizing_over_{ref}"] = (row["optimizing"]["simulate_s"]
                                                 / max(1e-9, row[ref]["simulate_s"]))
                row[f"optimizing_over_{ref}_cpu"] = row["optimizing"]["cpu_s"] / max(1e-9, row[ref]["cpu_s"])
    return row


@click.command("windows")
@click.option("--window", "names", multiple=True, type=click.Choice(sorted(WINDOWS)),
              help="Window, repeatable (default: the five held-out windows w1..w5).")
@click.option("--reference", "references", multiple=True, default=REFERENCES, show_default=True,
              help="Reference policy, repeatable.")
@click.option("--max-jobs", type=click.IntRange(1, 100_000), default=None,
              help="At most this many jobs of each window (a quick look; the figures are those "
                   "of whole windows).")
@click.option("--option", "options", multiple=True,
              help="KEY=VALUE option of the optimizing policy, repeatable (e.g. arrival_share=0): compares a "
                   "setting with the references on the same windows.")
@click.option("--data-dir", type=click.Path(file_okay=False))
@click.option("--predictors", "bundle", default=None,
              help="Predictor bundle (default: crossfit when a data folder is found, else default).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def bench_windows(ctx: click.Context, names: tuple[str, ...], references: tuple[str, ...],
                  max_jobs: int | None, options: tuple[str, ...], data_dir: str | None, bundle: str | None,
                  as_json: bool) -> None:
    """The optimizing policy on held-out Philly windows beside reference policies run in the same process:
    per window the simulation seconds of each, the optimizing/reference ratios, rounds, solves, milliseconds
    per round, seconds inside the solver (``solver_s``) and average JCT."""
    from dltsched.engine.app.cli.simulate import parse_options
    from dltsched.engine.app.registry import check_predictors, default_bench_predictors
    from dltsched.engine.app.vocabulary import options_by_name

    chosen = [WINDOWS[n] for n in names] if names else list(HELD_OUT)
    if max_jobs is not None:
        chosen = [replace(w, jobs=min(w.jobs, max_jobs)) for w in chosen]
    bundle = check_predictors(bundle) if bundle else default_bench_predictors(data_dir)
    policies = ("optimizing", *dict.fromkeys(r for r in references if r != "optimizing"))
    chosen_options = options_by_name(["optimizing"], parse_options(options), "--option")
    rows = []
    for window in chosen:
        row = run_window(window, policies, bundle=bundle, data_dir=data_dir, options=chosen_options)
        rows.append(row)
        if not (ctx.obj or {}).get("quiet") and not as_json:
            ratios = ", ".join(f"/{r} {row[f'optimizing_over_{r}']:.1f}x" for r in policies[1:])
            click.echo(f"{window.name}: optimizing {row['optimizing']['simulate_s']:.1f} s ({ratios})",
                       err=True)

    def human() -> None:
        head = ["window", "jobs", "GPUs", *(f"{p} (s)" for p in policies),
                *(f"opt/{r}" for r in policies[1:]), *(f"opt/{r} CPU" for r in policies[1:]),
                "rounds", "solves", "ms/round", "solver (s)", "opt avg JCT (h)"]
        click.echo(" | ".join(head))
        for row in rows:
            opt = row["optimizing"]
            cells = [row["window"], str(row["num_jobs"]), str(row["num_gpus"]),
                     *(f"{row[p]['simulate_s']:.2f}" for p in policies),
                     *(f"{row[f'optimizing_over_{r}']:.2f}" for r in policies[1:]),
                     *(f"{row[f'optimizing_over_{r}_cpu']:.2f}" for r in policies[1:]),
                     str(opt["num_rounds"]), str(opt["solves"]), f"{opt['ms_per_round']:.1f}",
                     f"{opt['solver_s']:.2f}", f"{opt['avg_jct_s'] / 3600:.3f}"]
            click.echo(" | ".join(cells))

    emit(rows, as_json, human)
