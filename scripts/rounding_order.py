"""The LP's rounded start of a window's rounds in two orders, against the rounds' proven optima.

    .venv/bin/python scripts/rounding_order.py --start-s 6500000 --jobs 900 --gpus 256 --seed 57

Simulates the window with the optimizing policy, keeping every round the CP-SAT backend solves, then solves
each round with the start rounded in the order of LP value x gain (the backend's) and in the order of LP value
alone (ties: gain; the order before), alternating, ``--repeats`` times each. Prints one JSON object: per order
the CPU seconds of the backend summed over the rounds (each repeat), the start's distance below the proven
optimum (median, 90th percentile, worst), the rounds proved by the LP relaxation alone and the rounds whose
plan is more than the round's gap below the optimum.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any


def main() -> None:
    """Run the window, solve its rounds with both orders and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start-s", type=float, required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import numpy as np

    from dltsched.engine.app.cli.bench_windows import Window, window_instance, window_policy
    from dltsched.engine.app.registry import default_bench_predictors
    from dltsched.engine.sim.simulator import simulate
    from dltsched.formulations.backends import SolveParams
    from dltsched.formulations.backends.cpsat import CpSat
    from dltsched.formulations.backends.greedy import greedy_selection
    from dltsched.formulations.backends.relaxation import Relaxation, lp_relaxation
    from dltsched.formulations.model import RoundModel

    rounds: list[tuple[Any, SolveParams]] = []
    solve = CpSat.solve

    def kept(self: CpSat, model: RoundModel, params: SolveParams) -> Any:
        rounds.append((model.cset, params))
        return solve(self, model, params)

    CpSat.solve = kept  # type: ignore[method-assign]
    window = Window("window", args.start_s, args.jobs, args.gpus, args.seed)
    policy, truth, config = window_policy("optimizing", window, bundle=default_bench_predictors(None),
                                          data_dir=None)
    simulate(window_instance(window, None), policy, truth=truth, config=config)
    CpSat.solve = solve  # type: ignore[method-assign]

    share_order = Relaxation.rounded

    def value_order(self: Relaxation, model: RoundModel, hint: Any = ()) -> list[int]:
        gains = np.asarray(model.gains)
        order = [c for c in np.lexsort((-gains, -self.values)).tolist() if self.values[c] > 1e-6]
        rounded: list[int] = greedy_selection(model.cset, first=order)
        if hint and float(gains[list(hint)].sum()) >= float(gains[rounded].sum()):
            return list(hint)
        return rounded

    def value(model: RoundModel, selected: Any) -> float:
        return float(sum(model.gains[c] for c in selected))

    optima = []
    for cset, params in rounds:
        model = RoundModel(cset)
        exact = RoundModel(replace(cset, problem=replace(cset.problem,
                                                         options=replace(model.options, relative_gap=0.0))))
        proof = CpSat().solve(exact, replace(params, time_limit_s=60.0))
        optima.append(value(model, proof.selected or ()))
    orders = {"share": share_order, "value": value_order}
    out: dict[str, Any] = {"window": vars(args), "rounds": len(rounds)}
    for name in orders:
        out[name] = {"backend_cpu_s": [], "start_below_optimum": {}, "proved_by_lp": 0, "over_gap": 0}
    for repeat in range(args.repeats):
        for name, order in orders.items():
            Relaxation.rounded = order  # type: ignore[method-assign]
            spent, distances, proved, over = 0.0, [], 0, 0
            for (cset, params), optimum in zip(rounds, optima, strict=True):
                model = RoundModel(cset)
                began = time.process_time()
                outcome = CpSat().solve(model, params)
                spent += time.process_time() - began
                proved += "proved by the LP relaxation" in outcome.message
                scale = max(abs(optimum), 1e-12)
                over += (optimum - value(model, outcome.selected or ())) / scale > model.options.relative_gap
                if repeat == 0:
                    fresh = RoundModel(cset)
                    relaxation = lp_relaxation(fresh)
                    if relaxation is not None:
                        start = relaxation.rounded(fresh, params.hint or ())
                        distances.append((optimum - value(fresh, start)) / scale)
            row = out[name]
            row["backend_cpu_s"].append(round(spent, 3))
            if repeat == 0:
                found = np.asarray(distances)
                row["start_below_optimum"] = {"median": float(np.median(found)),
                                              "p90": float(np.quantile(found, 0.9)),
                                              "worst": float(found.max())}
                row["proved_by_lp"], row["over_gap"] = proved, over
    Relaxation.rounded = share_order  # type: ignore[method-assign]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
