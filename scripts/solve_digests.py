"""Per solve of the optimizing policy on a Philly window, digests of what it decided from (to compare trees).

    .venv/bin/python scripts/solve_digests.py --start-s 6500000 --jobs 900 --gpus 256 --seed 57 --out a.json
    .venv/bin/python scripts/solve_digests.py --compare a.json b.json

Simulates the window with the optimizing policy as ``scripts/solve_stages.py`` does (the crossfit bundle when
a data folder is found) and writes, per solve: its time, a digest of the round problem (settings, GPU
classes, jobs with their options, co-location groups, unplaceable jobs), a digest of the candidate set (every
candidate, slots, conflicts, per-job lists, waiting times, node classes), the starting selection and the
selected candidates in full; and the run's average JCT. Two trees that decide the same give equal files;
``--compare`` says how many solves differ and in what. A change meant to keep plans bit for bit is run on
both trees (e.g. with ``PYTHONPATH`` pointing one run at a copy of the other tree) and compared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

from dltsched.engine.app.cli.bench_windows import (
    add_window_arguments,
    window_instance,
    window_of,
    window_policy,
)


def _digest(value: object) -> str:
    return hashlib.sha1(repr(value).encode()).hexdigest()[:16]


def record(args: argparse.Namespace) -> dict[str, Any]:
    """Simulate the window and return the digests."""
    import dltsched.formulations.solve as solve
    from dltsched.engine.app.registry import default_bench_predictors
    from dltsched.engine.sim.simulator import simulate

    solves: list[dict[str, Any]] = []
    start: dict[str, list[int]] = {}
    starting_selection, to_plan = solve.starting_selection, solve.to_plan

    def recorded_start(cset: Any, warm: Any) -> list[int]:
        start["selection"] = list(starting_selection(cset, warm))
        return start["selection"]

    def recorded_plan(cset: Any, selected: Any, **kw: Any) -> Any:
        p = cset.problem
        solves.append({"time_s": p.time_s,
                       "problem": _digest((p.options, p.nodes, p.jobs, p.groups, p.unplaceable)),
                       "candidates": _digest((cset.candidates, cset.slots, cset.slot_conflicts, cset.by_job,
                                              cset.unplaced_completion_s, cset.classes)),
                       "num_candidates": len(cset.candidates), "start": start.pop("selection", None),
                       "selected": [repr(cset.candidates[c]) for c in selected]})
        return to_plan(cset, selected, **kw)

    solve.starting_selection, solve.to_plan = recorded_start, recorded_plan
    bundle = default_bench_predictors(None)
    window = window_of(args)
    policy, truth, config = window_policy("optimizing", window, bundle=bundle, data_dir=None)
    result = simulate(window_instance(window, None), policy, truth=truth, config=config)
    return {"window": {k: getattr(args, k) for k in ("start_s", "jobs", "gpus", "seed")}, "bundle": bundle,
            "avg_jct_s": result.avg_jct_s, "solves": solves}


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How two digest files differ."""
    pairs = list(zip(a["solves"], b["solves"], strict=False))
    differ = [i for i, (x, y) in enumerate(pairs) if x != y]
    first = {} if not differ else {k: a["solves"][differ[0]][k] == b["solves"][differ[0]][k]
                                   for k in a["solves"][differ[0]]}
    return {"solves": [len(a["solves"]), len(b["solves"])], "solves_that_differ": len(differ),
            "first_difference": differ[0] if differ else None, "fields_equal_there": first,
            "avg_jct_s": [a["avg_jct_s"], b["avg_jct_s"]],
            "same": not differ and len(a["solves"]) == len(b["solves"]) and a["avg_jct_s"] == b["avg_jct_s"]}


def main() -> None:
    """Record or compare."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_window_arguments(parser, required=False)
    parser.add_argument("--out", help="write the digests here")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two digest files")
    args = parser.parse_args()
    if args.compare:
        with open(args.compare[0]) as fa, open(args.compare[1]) as fb:
            print(json.dumps(compare(json.load(fa), json.load(fb)), indent=1))
        return
    if None in (args.start_s, args.jobs, args.gpus, args.seed) or not args.out:
        parser.error("--start-s, --jobs, --gpus, --seed and --out are needed to record (or --compare A B)")
    with open(args.out, "w") as f:
        json.dump(record(args), f)


if __name__ == "__main__":
    main()
