"""Leave-one-model-out step-time figures of each host form, and nested over the forms and over every
variant searched (predictors/calibration/stepforms.py), on profile datasets of one GPU.

    python scripts/steptime_forms.py "$DLTSCHED_DATA"/h200 [--search] [--subsets K...] [--json]
    python scripts/steptime_forms.py --batches "$DLTSCHED_DATA"/gavel zeus.csv [--json]
    python scripts/steptime_forms.py --batches "$DLTSCHED_DATA"/lucid --gpu v100-32gb

``--subsets K...``: calibrations on K models drawn at random (``--draws`` of them, seeded), scored on the
models left out, for each rule of choosing the form and each form alone: what a rule is worth with few models.

``--batches``: per GPU of each dataset, the step time of the models profiled at several batch sizes or
precisions, never profiled (fitted on the other models: all their jobs, or one job each) or profiled at one
job (its smallest batch at full precision), beside the uncalibrated default and simple rules
(predictors/calibration/stepforms.py, ``batch_size_evaluation``).

Every fit uses the isolated runs of every dataset found (as `dltsched calibrate` does); the rows scored are
those of the `--sharing` datasets (time-slicing by default: the calibrate report's rows). MAPE plain and
weighted by each profile's spread of timed steps (docs/calibration.md), the median APE and a 90% interval of
the MAPE over the models held out (bootstrap); beside them on the same rows the uncalibrated kernel step
model (`default`) and the training rows' median step (`constant`). Nested figures under both rules of
choosing a variant (`best`, `kept`: stepforms.rules).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from dltsched.predictors.calibration import stepforms
from dltsched.predictors.calibration.data import read_datasets
from dltsched.predictors.calibration.evaluate import spread_weight
from dltsched.predictors.calibration.isolated import _columns, _step_array, default_step_params, fit_step_form
from dltsched.predictors.calibration.model import fit_rows


def _interval(apes: dict[str, list[float]], draws: int = 2000) -> tuple[float, float]:
    """90% interval of the MAPE when the held-out models are drawn again (bootstrap over models, seeded)."""
    rng = random.Random(0)
    per = list(apes.values())
    means = sorted(statistics.fmean(a for v in rng.choices(per, k=len(per)) for a in v) for _ in range(draws))
    return means[int(0.05 * draws)], means[int(0.95 * draws) - 1]


def _figures(apes: dict[str, list[float]], weights: dict[str, list[float | None]]) -> dict[str, float | None]:
    flat = [a for v in apes.values() for a in v]
    pairs = [(a, w) for m in apes for a, w in zip(apes[m], weights[m], strict=True)]
    weighted = (sum(a * w for a, w in pairs if w) / sum(w for _, w in pairs if w)
                if all(w for _, w in pairs) else None)
    low, high = _interval(apes)
    return {"mape": statistics.fmean(flat), "median_ape": statistics.median(flat), "weighted_mape": weighted,
            "mape_90_low": low, "mape_90_high": high, "n": len(flat)}


def _rules_apes(rows: list, scored: list) -> dict[str, dict[str, list[float]]]:
    """Per held-out model, the uncalibrated kernel step model's errors (``default``: its parameters on the
    same features, nothing fitted) and the training rows' median step's (``constant``)."""
    default = default_step_params()
    out: dict[str, dict[str, list[float]]] = {"default": {}, "constant": {}}
    for model in sorted({r.model for r in scored}):
        held = [r for r in scored if r.model == model]
        cols = _columns(held)
        constant = statistics.median(r.step_time_s for r in rows if r.model != model)
        out["default"][model] = [float(a) for a in 100.0 * abs(_step_array(default, cols) / cols["step"] - 1)]
        out["constant"][model] = [100.0 * abs(constant / r.step_time_s - 1) for r in held]
    return out


def batches(paths: list[str], gpu: str | None, as_json: bool, reference: str) -> None:
    out = []
    for path in paths:
        for data in read_datasets([path], gpu):
            rows = fit_rows(data.gpu, data.tf32, data.isolated)
            start = time.perf_counter()
            figures = stepforms.batch_size_figures(stepforms.batch_size_evaluation(rows, reference=reference))
            out.append({"data": path, "gpu": data.gpu, "rows": len(rows), "figures": figures,
                        "seconds": time.perf_counter() - start})
    if as_json:
        print(json.dumps(out, indent=1))
        return
    for got in out:
        print(f"{got['data']} {got['gpu']}: {got['rows']} jobs alone")
        if not got["figures"]:
            print("  no model profiled at two batch sizes or precisions")
        for scheme, fig in got["figures"].items():
            methods = [k[:-5] for k in fig if k.endswith("_mape")]
            print(f"  {scheme:<17} {fig['n']:>3} rows, {fig['models']} models  "
                  + "  ".join(f"{m} {fig[m + '_mape']:.1f}%" for m in methods))
            for b, per in fig["per_bin"].items():
                cells = "  ".join(f"{m} {per[m + '_mape']:.1f}%" for m in methods)
                print(f"    {b:<16} {per['n']:>3} rows  {cells}"
                      + f"  calibrated/measured median {per['calibrated_median_ratio']:.2f}")


def subsets(rows: list, scored: list, size: int, draws: int) -> dict[str, object]:
    """Calibrations on ``size`` models drawn at random (seeded), each scored on the models it left out: the
    form each rule of :func:`stepforms.rules` takes over the forms, and each form alone (the mean over the
    draws of the MAPE of the models left out)."""
    variants = stepforms.default_variants()
    rules = stepforms.rules(variants)
    rng = random.Random(0)
    models = sorted({r.model for r in scored})
    got: dict[str, list[float]] = {}
    differ = 0
    for _ in range(draws):
        drawn = set(rng.sample(models, size))
        train = [r for r in rows if r.model in drawn]
        cols = _columns([r for r in scored if r.model not in drawn])
        table = [stepforms.lomo_apes(train, v) for v in variants]
        errs = [statistics.fmean(float(a) for a in 100.0 * abs(
            _step_array(fit_step_form(train, *v), cols) / cols["step"] - 1.0)) for v in variants]
        picks = {name: rule(table) for name, rule in rules.items()}
        differ += picks["best"] != picks["kept"]
        for name, i in picks.items():
            got.setdefault(f"rule {name}", []).append(errs[i])
        for (form, _), err in zip(variants, errs, strict=True):
            got.setdefault(f"form {form}", []).append(err)
    return {"models_drawn": size, "draws": draws, "rules_differ": differ,
            **{k: statistics.fmean(v) for k, v in got.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--sharing", default="timeslice")
    parser.add_argument("--search", action="store_true",
                        help="also nested over every variant searched (slow)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--batches", action="store_true",
                        help="batch sizes and precisions never profiled, per GPU of each dataset")
    parser.add_argument("--reference", choices=stepforms.REFERENCES, default="smallest",
                        help="--batches: the batch size of each model profiled in the one-job schemes")
    parser.add_argument("--gpu", help="the GPU of a dataset that does not record its own (Lucid)")
    parser.add_argument("--subsets", type=int, nargs="+", metavar="K",
                        help="also calibrations on K models drawn at random, scored on the others")
    parser.add_argument("--draws", type=int, default=30, help="--subsets: draws per K")
    args = parser.parse_args()
    if args.batches:
        batches(args.dirs, args.gpu, args.json, args.reference)
        return
    datasets = read_datasets(args.dirs)
    gpu = datasets[0].gpu
    tf32 = frozenset().union(*(d.tf32 for d in datasets))
    rows = fit_rows(gpu, tf32, [r for d in datasets for r in d.isolated])
    scored_isolated = [r for d in datasets if d.sharing == args.sharing for r in d.isolated]
    scored = fit_rows(gpu, tf32, scored_isolated)
    weights: dict[str, list[float | None]] = {}
    for r in scored:
        weights.setdefault(r.model, []).append(spread_weight(r.step_rel_sd))
    out: dict[str, object] = {"gpu": gpu, "rows_fitted": len(rows), "rows_scored": len(scored),
                              "models": len({r.model for r in rows})}
    out["lomo_per_form"] = {f: _figures(stepforms.lomo_apes(rows, (f, opt), scored), weights)
                            for f, opt in stepforms.default_variants()}
    out["rules_same_rows"] = {m: _figures(apes, weights) for m, apes in _rules_apes(rows, scored).items()}
    sets = {"forms": stepforms.default_variants()}
    if args.search:
        sets["searched"] = stepforms.searched_variants()
    for name, variants in sets.items():
        start = time.perf_counter()
        by_rule = stepforms.nested_lomo_apes_by_rule(rows, variants, scored)
        for rule, (apes, picks) in by_rule.items():
            out[f"nested_over_{name}_{rule}"] = {
                **_figures(apes, weights), "variants": len(variants), "rule": rule,
                "per_model_mape": {m: statistics.fmean(v) for m, v in apes.items()},
                "picks": {m: stepforms.describe(v) for m, v in picks.items()},
                "seconds": time.perf_counter() - start}
    for size in args.subsets or ():
        if not 2 <= size < len({r.model for r in scored}):
            parser.error(f"--subsets {size}: draw from 2 to {len({r.model for r in scored}) - 1} models")
        out[f"subsets_{size}"] = subsets(rows, scored, size, args.draws)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{gpu}: {out['models']} models, {len(rows)} rows fitted, {len(scored)} scored ({args.sharing}); "
          "MAPE (median APE, 90% interval over the models held out) and weighted MAPE")

    def line(label: str, got: dict) -> str:
        return (f"  {label:<44} MAPE {got['mape']:5.1f}% (median {got['median_ape']:4.1f}%, "
                f"{got['mape_90_low']:.1f}-{got['mape_90_high']:.1f}%)  "
                f"weighted {got['weighted_mape'] or 0:5.1f}%")

    for f, got in out["lomo_per_form"].items():  # type: ignore[union-attr]
        print(line(f"LOMO, form {f}", got))
    for m, got in out["rules_same_rows"].items():  # type: ignore[union-attr]
        print(line(f"same rows, {m}", got))
    for key, got in out.items():
        if key.startswith("nested_over_"):
            print(line(f"nested over {got['variants']} {key[12:].replace('_', ', rule ')}", got))
            for m, pick in got["picks"].items():
                print(f"    {m:<14} {got['per_model_mape'][m]:5.1f}%  chose {pick}")
    for key, got in out.items():
        if key.startswith("subsets_"):
            cells = "  ".join(f"{k} {v:.1f}%" for k, v in got.items() if k.startswith(("rule", "form")))
            print(f"  calibrated on {got['models_drawn']} models drawn ({got['draws']} draws; rules differ "
                  f"in {got['rules_differ']}), MAPE of the others: {cells}")


if __name__ == "__main__":
    main()
