"""Batch makespan against its lower bound, seed by seed, for the ``makespan`` variant of an experiment file.

Runs the variant's policy and options (override with ``--option KEY=VALUE``) with the experiment's bundle, its
profiling settings, and optionally parts of the predictions taken from the truth itself (``--exact step``:
step times alone; ``mem``; ``speeds``), and prints the makespan, the bound and the gap, and with ``--detail``
the jobs that finished last with their true and predicted run times::

    python scripts/makespan_gap.py instances/experiments/makespan-philly-9e6-crossfit.toml --exact step
"""

from __future__ import annotations

import argparse
import time

from dltsched.engine.app.ablation import EXACT_PARTS, exact_parts, option_value
from dltsched.engine.app.experiments import load_experiment, load_workload


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment")
    p.add_argument("--exact", nargs="*", default=[], choices=EXACT_PARTS)
    p.add_argument("--seeds", nargs="*", type=int)
    p.add_argument("--option", action="append", default=[])
    p.add_argument("--detail", action="store_true")
    p.add_argument("--placed-type-only", action="store_true",
                   help="profile jobs only on the GPU type they run on, whatever the file says")
    a = p.parse_args(argv)
    from dltsched.engine.app.cli.simulate import make_truth, simulation_setup
    from dltsched.engine.app.registry import make_policy, predictors
    from dltsched.engine.sim.simulator import simulate

    exp = load_experiment(a.experiment)
    s = exp.spec
    variant = s.variants.get("makespan")
    policy = variant.policy if variant else "optimizing"
    options = dict(variant.options if variant else s.options.get("optimizing", {}))
    options |= {k: option_value(v) for k, v in (o.split("=", 1) for o in a.option)}
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    truth = make_truth(s.workload.data_dir, exp.truth_dirs(), s.truth_sharing)
    for seed in a.seeds if a.seeds is not None else s.seeds:
        inst = load_workload(exp, seed)
        if s.predictors == "exact":
            from dltsched.engine.sim.exact import exact_predictors

            preds = exact_predictors(truth)
        else:
            preds = exact_parts(predictors(exp.predictor_set(), s.workload.data_dir), truth, a.exact)
        bare = preds
        preds, config = simulation_setup(preds, seed=seed, memory=s.memory, profile_s=s.profile_on_arrival_s,
                                         profile_all_types=s.profile_every_type and not a.placed_type_only)
        t0 = time.monotonic()
        res = simulate(inst, make_policy(policy, predictors=preds, **options), truth=truth, config=config)
        d = res.to_dict(records=True)
        print(f"{exp.spec.name} seed {seed}: makespan {d['makespan_s'] / 3600:.2f} h, bound "
              f"{d['makespan_bound_s'] / 3600:.2f} h, gap {100 * d['makespan_gap']:+.1f}% "
              f"({time.monotonic() - t0:.0f} s)", flush=True)
        if a.detail:
            jobs = {j.id: j for j in inst.jobs}
            types = sorted(inst.cluster.gpus_by_type())
            for r in sorted(d["records"], key=lambda r: -r["finish_s"])[:5]:
                j = jobs[r["job_id"]]
                hours = j.total_iterations / 3600
                true_h = {t: round(truth.step_time_s(j, t, j.num_gpus) * hours, 1) for t in types}
                pred_h = {t: round(bare.step_time.step_time_s(j, t, j.num_gpus) * hours, 1) for t in types}
                start_h = r["first_start_s"] / 3600
                print(f"  {j.id} {j.model}:{j.batch_size} x{j.num_gpus} start {start_h:.1f} h"
                      f" end {r['finish_s'] / 3600:.1f} h; alone, true {true_h}, predicted {pred_h}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
