"""Record the golden files of ``tests/golden/data``: rounds with each backend's plan; simulation metrics.

The golden files pin the scheduler's behaviour so that a refactoring can show it changed nothing:

* ``rounds.json.gz``: round problems captured from real runs of the optimizing policy (the shipped example
  instances, one Philly window, generated instances of several sizes; running jobs, co-location, freezing,
  down GPUs, every objective), each with the plan of every backend of the registry. The problems are stored
  with ``deterministic=True``, ``relative_gap=0`` and a generous time limit, so exact backends prove their
  optimum (a plan's objective is then the round's optimum, whichever tie a solver picks).
* ``simulations.json``: the metrics of every policy on the shipped instances, and of the optimizing policy and
  two baselines on the Philly window.

Regenerate (about 10 minutes on two cores; the Philly parts need the shared data folder)::

    nice -n 10 .venv/bin/python scripts/record_golden.py            # both files
    nice -n 10 .venv/bin/python scripts/record_golden.py --only rounds

Regenerate only when behaviour is meant to change, and say so: ``tests/golden`` compares against these files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "data"
ROUNDS_FILE = OUT / "rounds.json.gz"
SIMULATIONS_FILE = OUT / "simulations.json"
FORMAT = "dltsched-golden/1"
NUM_ROUNDS = 200
#: the options every golden round is solved under: reproducible, exact backends prove their optimum
GOLDEN_OPTIONS = {"deterministic": True, "relative_gap": 0.0, "time_limit_s": 60.0}
#: the Philly window: the first jobs of the trace on two 8-GPU V100 nodes (busy enough to queue and co-locate)
PHILLY = {"name": "philly", "cluster": "v100:2x8", "max_jobs": 40, "seed": 0}
#: rounds of at most this many jobs count as small; at most this share of the golden rounds is small
SMALL_ROUND_JOBS = 2
MAX_SMALL_ROUNDS = 0.15
#: metrics that repeat exactly on a rerun (the rest are wall-clock timings)
DETERMINISTIC_METRICS = ("num_jobs", "num_jobs_finished", "num_jobs_unfinished", "avg_jct_s", "median_jct_s",
                         "p95_jct_s", "p99_jct_s", "weighted_avg_jct_s", "makespan_s", "avg_queueing_s",
                         "p99_queueing_s", "gpu_util", "num_preemptions", "num_oom", "node_failures",
                         "fault_interruptions", "ftf_mean", "ftf_max", "num_rounds", "makespan_bound_s",
                         "makespan_gap")


def examples() -> list[Path]:
    """The shipped example instances."""
    return sorted((ROOT / "instances" / "examples").glob("*.json"))


def philly_instance() -> Any:
    """The Philly window of :data:`PHILLY` (needs the shared data folder)."""
    from dltsched.instances.readers import read_workload

    return read_workload(PHILLY["name"], cluster=PHILLY["cluster"], max_jobs=PHILLY["max_jobs"],
                         seed=PHILLY["seed"])


def generated(num_jobs: int, num_gpus: int, seed: int) -> Any:
    from dltsched.instances.generator import GeneratorSpec, generate_instance

    return generate_instance(GeneratorSpec(num_jobs=num_jobs, num_gpus=num_gpus, seed=seed))


@contextmanager
def capturing() -> Iterator[list[Any]]:
    """Every round problem the optimizing policy solves while the context is open."""
    import dltsched.formulations.decide as decide

    seen: list[Any] = []
    original = decide.solve_problem

    def spy(problem: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(problem)
        return original(problem, *args, **kwargs)

    decide.solve_problem = spy  # type: ignore[assignment]
    try:
        yield seen
    finally:
        decide.solve_problem = original


def sources() -> list[tuple[str, Callable[[], Any], dict[str, Any], dict[str, Any]]]:
    """(name, instance, optimizing policy options, simulation options) of the runs rounds come from."""
    out: list[tuple[str, Callable[[], Any], dict[str, Any], dict[str, Any]]] = []
    objectives: list[dict[str, Any]] = [
        {"objective": "jct"}, {"objective": "weighted_completion"}, {"objective": "effective_progress"},
        {"objective": "effective_progress", "length_weight": 1.0}, {"objective": "makespan"},
        {"objective": "jct", "max_jobs_per_gpu": 3, "freeze_levels": 2},
    ]
    for path in examples():
        for opts in objectives:
            out.append((f"{path.stem}", lambda p=path: p, opts, {}))
    faults = {"faults": {"mtbf_s": 6 * 3600.0, "mttr_s": 1800.0}}
    out.append(("philly", philly_instance, {"objective": "jct"}, {}))
    out.append(("philly", philly_instance, {"objective": "effective_progress", "length_weight": 0.5}, faults))
    for num_jobs, num_gpus, seed in ((12, 8, 1), (30, 16, 2), (60, 32, 3)):
        for opts in ({"objective": "jct"}, {"objective": "weighted_completion", "max_jobs_per_gpu": 3}):
            out.append((f"generated-{num_jobs}x{num_gpus}",
                        lambda n=num_jobs, g=num_gpus, s=seed: generated(n, g, s),
                        opts, faults if seed != 1 else {}))
    return out


def sim_config(extra: dict[str, Any], seed: int = 0) -> Any:
    from dltsched.engine.sim.config import SimulationConfig
    from dltsched.engine.sim.faults import FaultConfig

    faults = FaultConfig(**extra["faults"]) if "faults" in extra else None
    return SimulationConfig(seed=seed, faults=faults)


def capture(max_round_jobs: int = 40) -> list[tuple[str, dict[str, Any], Any]]:
    """Run every source once; keep its rounds of at most ``max_round_jobs`` jobs, with source and options."""
    from dltsched.engine.app.api import load_instance_file, load_predictors, optimizing_policy
    from dltsched.engine.sim.simulator import simulate

    preds = load_predictors("default")
    out = []
    for name, make, opts, extra in sources():
        inst = make()
        inst = load_instance_file(inst) if isinstance(inst, Path) else inst
        policy = optimizing_policy(preds, **opts)
        began = time.perf_counter()
        with capturing() as seen:
            simulate(inst, policy, config=sim_config(extra))
        kept = [p for p in seen if 0 < len(p.jobs) <= max_round_jobs]
        print(f"  {name} {opts} {extra}: {len(seen)} rounds, {len(kept)} kept "
              f"({time.perf_counter() - began:.1f} s)", file=sys.stderr)
        out.extend((name, {**opts, **extra}, p) for p in kept)
    return out


def golden_problem(problem: Any) -> Any:
    """``problem`` under :data:`GOLDEN_OPTIONS`."""
    from dltsched.formulations.problem import RoundProblem

    data = problem.to_dict()
    data["options"] = {**data["options"], **GOLDEN_OPTIONS}
    return RoundProblem.from_dict(json.loads(json.dumps(data)))


def features(problem: Any) -> dict[str, bool]:
    """What a round exercises (for choosing a varied sample and for the test's report)."""
    return {"running": any(j.current_gpus for j in problem.jobs), "down": bool(problem.down_gpus()),
            "groups": bool(problem.groups),
            "freezing": any(o.freeze_level > 0 for j in problem.jobs for o in j.options),
            "unplaceable": bool(problem.unplaceable)}


Captured = list[tuple[str, dict[str, Any], Any]]


def choose(captured: Captured, count: int) -> Captured:
    """``count`` distinct rounds, spread over the sources and the features they exercise."""
    distinct: dict[str, tuple[str, dict[str, Any], Any]] = {}
    for name, opts, problem in captured:
        key = hashlib.sha256(json.dumps(problem.to_dict(), sort_keys=True).encode()).hexdigest()
        distinct.setdefault(key, (name, opts, problem))
    pool = list(distinct.values())
    by_kind: dict[tuple[Any, ...], list[tuple[str, dict[str, Any], Any]]] = {}
    for item in pool:
        kind = (item[0], json.dumps(item[1], sort_keys=True), *features(item[2]).values())
        by_kind.setdefault(kind, []).append(item)
    chosen: list[tuple[str, dict[str, Any], Any]] = []
    queues = [list(v) for v in by_kind.values()]
    for q in queues:  # spread each kind's rounds over its run: take them from evenly spaced positions
        q[:] = [q[i] for i in _spread(len(q))]
    small = 0  # rounds of one or two jobs are many in a run (a working set of new arrivals); keep a few
    while len(chosen) < count and any(queues):
        for q in queues:
            while q and len(q[0][2].jobs) <= SMALL_ROUND_JOBS and small >= MAX_SMALL_ROUNDS * count:
                q.pop(0)
            if q and len(chosen) < count:
                small += len(q[0][2].jobs) <= SMALL_ROUND_JOBS
                chosen.append(q.pop(0))
    return chosen


def _spread(n: int) -> list[int]:
    """0..n-1 reordered so that any prefix is spread over the range (bisection order)."""
    order: list[int] = []
    seen: set[int] = set()
    step = n
    while len(order) < n:
        for i in range(0, n, max(1, step)):
            if i not in seen:
                seen.add(i)
                order.append(i)
        step //= 2
        if step == 0:
            step = 1
    return order


def plan_record(problem: Any, backend: str) -> dict[str, Any]:
    """The plan of ``backend`` on ``problem`` (checked), as the golden file stores it."""
    from dltsched.formulations.checker import check_plan
    from dltsched.formulations.solve import solve_problem

    try:
        result = solve_problem(problem, backend)
    except ValueError as err:  # a backend refusing the round (decomposed on makespan): the test expects it
        return {"error": str(err)}
    plan = result.plan
    report = check_plan(problem, plan)
    if not report.feasible:
        raise SystemExit(f"{backend}: the checker rejects the plan: {report.violations[:3]}")
    return {"status": str(plan.status), "termination": str(result.termination),
            "objective": plan.objective, "bound": finite(plan.bound),
            "checked_objective": report.objective,
            "assignments": sorted([a.job_id, sorted(a.gpus), a.freeze_level] for a in plan.assignments)}


def finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def record_rounds(count: int, cache: Path | None = None) -> None:
    from dltsched.formulations.backends import BACKENDS
    from dltsched.formulations.problem import RoundProblem

    if cache is not None and cache.exists():
        chosen = [(n, o, RoundProblem.from_dict(p)) for n, o, p in json.loads(cache.read_text())]
    else:
        print("capturing rounds", file=sys.stderr)
        chosen = choose(capture(), count)
        if cache is not None:
            cache.write_text(json.dumps([(n, o, p.to_dict()) for n, o, p in chosen]))
    rounds = []
    for i, (name, opts, problem) in enumerate(chosen):
        problem = golden_problem(problem)
        plans = {backend: plan_record(problem, backend) for backend in BACKENDS}
        rounds.append({"id": f"r{i:03d}-{name}", "source": name, "policy_options": opts,
                       "features": features(problem), "problem": problem.to_dict(), "plans": plans})
    data = {"format": FORMAT, "golden_options": GOLDEN_OPTIONS, "backends": list(BACKENDS), "rounds": rounds}
    OUT.mkdir(parents=True, exist_ok=True)
    with gzip.open(ROUNDS_FILE, "wt") as f:
        json.dump(data, f, sort_keys=True)
    print(f"wrote {ROUNDS_FILE} ({len(rounds)} rounds)", file=sys.stderr)


def simulation_cases() -> list[dict[str, Any]]:
    """The simulations whose metrics are recorded: every policy on every example; three on Philly."""
    from dltsched.engine.app.registry import policy_names

    cases = [{"instance": f"examples/{p.name}", "policy": name}
             for p in examples() for name in policy_names()]
    cases += [{"instance": "philly", "policy": name} for name in ("optimizing", "tiresias", "fifo")]
    return cases


def is_slow(case: dict[str, Any]) -> bool:
    """Whether the test replays ``case`` only in the slow run: all but every policy on the tiny examples and
    the baselines on the default example (a second or less each)."""
    name = case["instance"].removeprefix("examples/")
    baseline = not case["policy"].startswith("optimizing")
    return not (name.startswith("tiny-") or (name == "default.json" and baseline))


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """The deterministic metrics of one simulation case (seed 0, deterministic solves)."""
    from dltsched.engine.app.api import load_instance_file, simulate_instance

    inst = philly_instance() if case["instance"] == "philly" else load_instance_file(
        ROOT / "instances" / case["instance"])
    result = simulate_instance(inst, case["policy"], seed=0)
    return {name: getattr(result, name) for name in DETERMINISTIC_METRICS}


def record_simulations() -> None:
    from dltsched.engine.app.api import load_predictors

    load_predictors("default")  # loaded once before the clock starts: the first case is not slow for it
    out = []
    for case in simulation_cases():
        began = time.perf_counter()
        metrics = run_case(case)
        case = {**case, "slow": is_slow(case)}
        print(f"  {case['instance']} {case['policy']}: avg JCT {metrics['avg_jct_s']:.1f} s "
              f"({time.perf_counter() - began:.1f} s)", file=sys.stderr)
        out.append({**case, "metrics": metrics})
    data = {"format": FORMAT, "deterministic_metrics": list(DETERMINISTIC_METRICS), "seed": 0,
            "philly": PHILLY,
            "cases": out}
    OUT.mkdir(parents=True, exist_ok=True)
    SIMULATIONS_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SIMULATIONS_FILE} ({len(out)} cases)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("rounds", "simulations"), help="record one file only")
    parser.add_argument("--rounds", type=int, default=NUM_ROUNDS, help="how many rounds to record")
    parser.add_argument("--cache", type=Path,
                        help="keep the captured rounds in this file (reused when it exists)")
    args = parser.parse_args(argv)
    if args.only in (None, "rounds"):
        record_rounds(args.rounds, args.cache)
    if args.only in (None, "simulations"):
        record_simulations()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
