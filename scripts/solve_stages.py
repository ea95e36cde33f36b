"""CPU time of the optimizing policy's solves on a Philly window, per stage of the round, beside Tiresias.

    .venv/bin/python scripts/solve_stages.py --start-s 9000000 --jobs 500 --gpus 64 --seed 31

Simulates the window with the optimizing policy and then with Tiresias in one process (the crossfit bundle
when a data folder is found), as ``dltsched bench windows`` does, and prints one JSON object: each policy's
CPU seconds, the optimizing/Tiresias ratio, solves, and per solve the CPU milliseconds of the whole round
(``decide_round``) and of its stages: building the round (its co-location groups and their pricing apart),
the candidates, the starting selection, the CP-SAT backend (its search apart), the mapping and the checker.
The stages are timed by wrapping the pipeline's functions with ``time.process_time`` (a few microseconds per
call), not by a profiler, so Python is not inflated against the solver's C++.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from collections.abc import Callable
from typing import Any

from dltsched.engine.app.cli.bench_windows import (
    add_window_arguments,
    window_instance,
    window_of,
    window_policy,
)


def _timed(owner: Any, name: str, label: str, spent: dict[str, float], calls: dict[str, int]) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kw: Any) -> Any:
        began = time.process_time()
        try:
            return inner(*args, **kw)
        finally:
            spent[label] += time.process_time() - began
            calls[label] += 1

    setattr(owner, name, wrapper)


def main() -> None:
    """Run the window and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_window_arguments(parser)
    args = parser.parse_args()

    import dltsched.formulations.backends.cpsat as cpsat
    import dltsched.formulations.build as build
    import dltsched.formulations.pipeline as pipeline
    import dltsched.formulations.solve as solve
    from dltsched.engine.app.registry import default_bench_predictors, predictors
    from dltsched.engine.sim.simulator import simulate

    spent: dict[str, float] = collections.defaultdict(float)
    calls: dict[str, int] = collections.defaultdict(int)
    from ortools.sat.python import cp_model_helper

    stages = [(pipeline, "decide_round", "round"), (pipeline, "build_round", "build"),
              (build, "_groups", "build.groups"), (build, "_priced", "build.groups.pricing"),
              (build, "_price_pairs", "build.groups.pricing"),
              (solve, "build_candidates", "candidates"), (solve, "starting_selection", "start"),
              (cpsat.CpSat, "solve", "cpsat"), (cp_model_helper.SolveWrapper, "solve", "cpsat.search"),
              (solve, "finish", "mapping"), (pipeline, "check_plan", "check")]
    for owner, name, label in stages:
        _timed(owner, name, label, spent, calls)
    bundle = default_bench_predictors(None)
    window = window_of(args)
    inst = window_instance(window, None)
    predictors(bundle, None)
    out: dict[str, Any] = {"window": vars(args), "bundle": bundle}
    for name in ("optimizing", "tiresias"):
        policy, truth, config = window_policy(name, window, bundle=bundle, data_dir=None)
        began = time.process_time()
        result = simulate(inst, policy, truth=truth, config=config)
        out[name] = {"cpu_s": round(time.process_time() - began, 3), "rounds": result.num_rounds,
                     "solves": len(getattr(policy, "solve_log", ())), "avg_jct_s": result.avg_jct_s}
        if name == "optimizing":
            solves = max(1, calls["round"])
            out["per_solve_cpu_ms"] = {k: round(1e3 * v / solves, 2) for k, v in spent.items()}
    out["optimizing_over_tiresias_cpu"] = round(out["optimizing"]["cpu_s"] / out["tiresias"]["cpu_s"], 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
