"""Whole-round latency of one (size, backend) on any checkout of dltsched, for ratios between two trees.

Usage: ``python scripts/round_total.py JOBSxGPUS BACKEND REPEATS TIME_LIMIT GAP [SOLVER]``, run with each
checkout's own Python. Decides the synthetic round of ``bench solve`` REPEATS times (build_round ->
solve_problem -> check_plan, predictions memoised across repeats, objective ``jct``) and prints JSON with the
median/min/max round total, gaps, statuses and peak RSS. It uses only the API every tree since the layered
restructure has, so the same file measures an older tree and the current one in the same session
(``bench solve`` reports the stages of the current tree only)."""
import json
import resource
import statistics
import sys
import time

from dltsched.engine.app.registry import predictors
from dltsched.engine.domain.predictors import memoized
from dltsched.formulations.bench import synthetic_state
from dltsched.formulations.build import build_round
from dltsched.formulations.checker import check_plan
from dltsched.formulations.problem import RoundOptions
from dltsched.formulations.solve import solve_problem

size, backend = sys.argv[1], sys.argv[2]
repeats, limit, gap = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
solver = sys.argv[6] if len(sys.argv) > 6 else None
jobs, gpus = map(int, size.split("x"))
opts = RoundOptions(objective="jct", relative_gap=gap, time_limit_s=limit)
bundle = predictors("analytic")
solve_problem(build_round(synthetic_state(4, 8), bundle, opts), backend)  # load the solver
state = synthetic_state(jobs, gpus)
asked = memoized(bundle)
totals, builds, gaps, statuses, objs = [], [], [], [], []
for _ in range(repeats):
    t0 = time.perf_counter()
    p = build_round(state, asked, opts)
    t1 = time.perf_counter()
    r = solve_problem(p, backend, time_limit_s=limit, **({"solver": solver} if solver else {}))
    rep = check_plan(p, r.plan)
    t2 = time.perf_counter()
    assert rep.feasible, rep.violations[:3]
    totals.append(t2 - t0)
    builds.append(t1 - t0)
    gaps.append(r.plan.gap)
    statuses.append(r.plan.status)
    objs.append(rep.objective)
print(json.dumps({"size": size, "backend": backend + (":" + solver if solver else ""),
                  "round_total_median_s": statistics.median(totals), "round_total_min_s": min(totals),
                  "round_total_max_s": max(totals), "first_s": totals[0],
                  "round_build_median_s": statistics.median(builds), "gaps": gaps, "statuses": statuses,
                  "objectives": objs,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
