"""CP-SAT's rounds of a Philly window solved with and without the LP first, against their proven optima.

    .venv/bin/python scripts/round_search.py --start-s 6500000 --jobs 900 --gpus 256 --seed 57

Simulates the window with the optimizing policy on the whole-model path (``CpSat.lp_first = False``),
keeping every round's solver input, then solves each round with both paths, one after the other, and once
more on the whole model at gap 0 for its optimum. Prints one JSON object: per path the CPU milliseconds of
the search (CP-SAT's ``solve``) and of the whole backend summed over the rounds, the rounds whose plan is
more than the round's gap below the optimum, the worst relative distance, and whether every bound holds.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

from dltsched.engine.app.cli.bench_windows import (
    add_window_arguments,
    window_instance,
    window_of,
    window_policy,
)


def main() -> None:
    """Run the window, solve its rounds both ways and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_window_arguments(parser)
    args = parser.parse_args()

    from ortools.sat.python import cp_model_helper

    from dltsched.engine.app.registry import default_bench_predictors
    from dltsched.engine.sim.simulator import simulate
    from dltsched.formulations.backends import SolveParams
    from dltsched.formulations.backends.cpsat import CpSat
    from dltsched.formulations.model import RoundModel

    class Whole(CpSat):
        lp_first = False

    rounds: list[tuple[RoundModel, SolveParams]] = []
    inner = CpSat.solve

    def kept(self: CpSat, model: RoundModel, params: SolveParams) -> Any:
        rounds.append((model, params))
        return inner(self, model, params)

    CpSat.solve = kept  # type: ignore[method-assign]
    CpSat.lp_first = False
    bundle = default_bench_predictors(None)
    window = window_of(args)
    policy, truth, config = window_policy("optimizing", window, bundle=bundle, data_dir=None)
    simulate(window_instance(window, None), policy, truth=truth, config=config)
    CpSat.solve = inner  # type: ignore[method-assign]
    CpSat.lp_first = True

    searched = [0.0]
    search = cp_model_helper.SolveWrapper.solve

    def timed(self: Any, proto: Any) -> Any:
        began = time.process_time()
        try:
            return search(self, proto)
        finally:
            searched[0] += time.process_time() - began

    cp_model_helper.SolveWrapper.solve = timed  # type: ignore[method-assign]
    paths = {"whole_model": Whole(), "lp_first": CpSat()}
    out: dict[str, Any] = {"window": vars(args), "rounds": len(rounds)}
    figures = {name: {"search_cpu_ms": 0.0, "backend_cpu_ms": 0.0, "over_gap": 0, "worst_below_optimum": 0.0,
                      "bounds_hold": True} for name in paths}
    for model, params in rounds:
        cset = model.cset
        exact = RoundModel(replace(cset, problem=replace(cset.problem, options=replace(model.options,
                                                                                      relative_gap=0.0))))
        proof = Whole().solve(exact, SolveParams(60.0))
        assert proof.selected is not None and proof.termination == "optimal", proof
        optimum = sum(model.gains[c] for c in proof.selected)
        for name, backend in paths.items():
            fresh = RoundModel(cset)
            searched[0] = 0.0
            began = time.process_time()
            outcome = backend.solve(fresh, params)
            spent = time.process_time() - began
            row = figures[name]
            row["search_cpu_ms"] += 1e3 * searched[0]
            row["backend_cpu_ms"] += 1e3 * spent
            value = sum(model.gains[c] for c in outcome.selected or ())
            below = (optimum - value) / max(abs(optimum), 1e-12)
            row["over_gap"] += below > model.options.relative_gap
            row["worst_below_optimum"] = max(row["worst_below_optimum"], below)
            row["bounds_hold"] &= outcome.bound is not None and outcome.bound >= optimum - 1e-6 * abs(optimum)
    for row in figures.values():
        row["search_cpu_ms"] = round(row["search_cpu_ms"], 1)
        row["backend_cpu_ms"] = round(row["backend_cpu_ms"], 1)
    out.update(figures)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
