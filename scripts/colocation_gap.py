"""Where the co-location gain goes between exact and cross-fitted predictions.

Runs ``optimizing`` and its ``no-colocation`` variant of an experiment file with predictors mixed part by part
from the experiment's bundle and the truth itself (``exact``), and prints the paired change in average JCT and
makespan when co-location is switched off. Parts: ``step`` (step times alone), ``mem`` (memory alone and of
groups), ``speeds`` (co-located speeds). Policy options can be overridden to test caution.

    python scripts/colocation_gap.py instances/experiments/ablation-finetune-h200mps.toml \
        --exact speeds --seeds 0 1 2 --option max_jobs_per_gpu=3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from dltsched.engine.app.ablation import exact_parts, option_value
from dltsched.engine.app.experiments import load_experiment, load_workload


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment")
    p.add_argument("--exact", nargs="*", default=[], choices=["step", "mem", "speeds"])
    p.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    p.add_argument("--option", action="append", default=[])
    p.add_argument("--label", default="")
    a = p.parse_args(argv)
    from dltsched.engine.app.cli.simulate import make_truth, simulation_setup
    from dltsched.engine.app.registry import make_policy, predictors
    from dltsched.engine.sim.simulator import simulate

    exp = load_experiment(a.experiment)
    s = exp.spec
    truth = make_truth(s.workload.data_dir, exp.truth_dirs(), s.truth_sharing)
    options = dict(s.options.get("optimizing", {}))
    options |= {k: option_value(v) for k, v in (o.split("=", 1) for o in a.option)}
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    changes: dict[str, list[float]] = {"avg_jct_s": [], "makespan_s": []}
    for seed in a.seeds:
        inst = load_workload(exp, seed)
        out = {}
        for label, extra in (("full", {}), ("nocoloc", {"max_jobs_per_gpu": 1})):
            preds = exact_parts(predictors(exp.predictor_set(), s.workload.data_dir), truth, a.exact)
            preds, config = simulation_setup(preds, seed=seed, memory=s.memory,
                                             profile_s=s.profile_on_arrival_s)
            t0 = time.monotonic()
            policy = make_policy("optimizing", predictors=preds, **(options | extra))
            res = simulate(inst, policy, truth=truth, config=config).to_dict()
            out[label] = res
            print(f"seed {seed} {label}: avg JCT {res['avg_jct_s'] / 3600:.3f} h, makespan "
                  f"{res['makespan_s'] / 3600:.3f} h, {time.monotonic() - t0:.0f} s", file=sys.stderr)
        for m in changes:
            changes[m].append(out["nocoloc"][m] / out["full"][m] - 1.0)
    from dltsched.engine.app.ablation import _ci95

    line = {m: f"{100 * statistics.fmean(v):+.1f} ± {100 * _ci95(v):.1f}%" for m, v in changes.items()}
    label = a.label or ",".join(a.exact) or "crossfit"
    print(f"{label} {a.option}: co-location off: avg JCT {line['avg_jct_s']}, makespan {line['makespan_s']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
