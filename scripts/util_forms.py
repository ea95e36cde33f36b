"""Leave-one-model-out utilisation figures of each utilisation form, and the nested figure of choosing
among them, on profile datasets of one GPU.

    python scripts/util_forms.py "$DLTSCHED_DATA"/h200 [--json]

Forms (``gpu`` the calibrated GPU seconds of the step, ``step`` the calibrated step time, both from the step
model fitted in the same fold; ``n`` the kernel launches):

- ``power``: the form of older bundles, 100 min(1, ((gpu + b n) / step) ** gamma) (resources.fit_util,
  form "power");
- ``ratio``: 100 min(1, k gpu / max(step, gpu)), one factor k: the form the calibration ships
  (resources.fit_util, form "ratio");
- ``ratio_launch``: 100 min(1, k (gpu + b n) / max(step, gpu + b n)), a factor and a busy time per launch;
- ``busy``: ``ratio`` with k = 1 (the step model's GPU share as it is, nothing fitted);
- ``ratio_long``: ``ratio`` fitted only on rows whose timed window (30 steps where the profile does not say)
  lasts 0.75 s or more.

Beside them on the same rows: the uncalibrated default (the engine's busy share of its step) and the constant
(the median of the other models' readings). Every figure is also given on the rows whose timed window lasts
0.75 s or more: NVML averages utilisation over up to a second, so a window of a few tens of milliseconds
reads mostly what the GPU did before it. Jobs measured alone in two datasets (the ``mps`` folder repeats six
of them) give the repeat-measurement spread of the readings themselves.

Each is fitted on errors in percentage points. Nested: for each held-out model the form is chosen by
leave-one-model-out (mean points) on the other models, fitted on them and scores the held-out model.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from dltsched.predictors.calibration import isolated as iso
from dltsched.predictors.calibration import resources
from dltsched.predictors.calibration.data import read_datasets
from dltsched.predictors.calibration.model import fitted_and_scored_rows

FORMS = ("power", "ratio", "ratio_launch", "busy", "ratio_long")
#: timed steps of a profile that does not say (the profiler's minimum) and the window (s) from which NVML's
#: utilisation is read over the timed steps alone (it averages over up to a second)
STEPS, LONG_WINDOW_S = 30, 0.75


def _long(r: Any) -> bool:
    return STEPS * r.step_time_s >= LONG_WINDOW_S


def _inputs(step: dict[str, float], rows: Sequence[Any]) -> tuple[np.ndarray, ...]:
    gpu = np.array([iso.gpu_seconds(step, r.features, r.scope) for r in rows])
    pred = np.array([iso.step_seconds(step, r.features, r.batch, r.scope) for r in rows])
    launches = np.array([r.features["launches"] for r in rows])
    return gpu, pred, launches


def _predict(form: str, p: dict[str, float], step: dict[str, float], rows: Sequence[Any]) -> np.ndarray:
    gpu, pred, launches = _inputs(step, rows)
    if form in resources.UTIL_FORMS or form in ("busy", "ratio_long"):
        return np.array([resources.util_pct(p, g, n, s) for g, n, s in zip(gpu, launches, pred, strict=True)])
    busy = gpu + p.get("launch_us", 0.0) * 1e-6 * launches
    return 100.0 * np.minimum(1.0, p["k"] * busy / np.maximum(pred, busy))


def _fit(form: str, step: dict[str, float], rows: Sequence[Any]) -> dict[str, float]:
    got = [r for r in rows if r.gpu_util is not None and r.scope != "fwd_bwd"]
    if form == "busy":
        return {"k": 1.0}
    if form == "ratio_long":
        return resources.fit_util([r for r in got if _long(r)], step, form="ratio")
    if form in resources.UTIL_FORMS:
        return resources.fit_util(got, step, form=form)
    names = ("k", "launch_us")
    prior = {"k": 1.0, "launch_us": 2.0}
    x0 = np.log([prior[n] for n in names])
    measured = np.array([float(r.gpu_util) for r in got])

    def residuals(x: np.ndarray) -> np.ndarray:
        p = {n: float(v) for n, v in zip(names, np.exp(x), strict=True)}
        return np.concatenate([(_predict(form, p, step, got) - measured) / 100.0, 0.1 * (x - x0)])

    return {n: float(v) for n, v in zip(names, np.exp(iso.robust_fit(residuals, x0)), strict=True)}


def _errors(form: str, step: dict[str, float], train: Sequence[Any], held: Sequence[Any]) -> list[tuple]:
    p = _fit(form, step, train)
    pred = _predict(form, p, step, held)
    return [(r.model, float(q), float(r.gpu_util), _long(r)) for r, q in zip(held, pred, strict=True)]


def _scored(rows: Sequence[Any]) -> list[Any]:
    return [r for r in rows if r.gpu_util and r.scope != "fwd_bwd"]


def _summary(errs: Sequence[tuple]) -> dict[str, float]:
    ape = [100.0 * abs(q / m - 1.0) for _, q, m, _ in errs]
    low = [100.0 * abs(q / m - 1.0) for _, q, m, _ in errs if m >= 5.0]
    long = [100.0 * abs(q / m - 1.0) for _, q, m, lg in errs if lg]
    return {"mape": statistics.fmean(ape), "points": statistics.fmean(abs(q - m) for _, q, m, _ in errs),
            "median_ape": statistics.median(ape), "mape_readings_from_5pct": statistics.fmean(low),
            "mape_long_windows": statistics.fmean(long) if long else float("nan"), "n_long": len(long),
            "n": len(errs)}


def _baselines(datasets: Sequence[Any], rows: Sequence[Any], scored: Sequence[Any]) -> dict[str, list[tuple]]:
    """The uncalibrated default (the engine's busy share of its step) and the constant (the median of the
    other models' readings) on the same held-out rows."""
    from dltsched.engine.domain.model import Job
    from dltsched.predictors.steptime import DeletePopStepTime

    engine, gpu = DeletePopStepTime(), datasets[0].gpu
    dataset = {(r.model, r.batch_size): r.dataset for d in datasets for r in d.isolated}
    out: dict[str, list[tuple]] = {"default": [], "constant": []}
    for r in scored:
        job = Job(id="u", model=r.model, dataset=dataset[r.model, r.batch], batch_size=r.batch,
                  total_iterations=1.0)
        b = engine.breakdown(job, gpu, scope=r.scope)
        default = 100.0 * min(1.0, (b.compute_s + b.memory_s) / b.step_time_s)
        constant = statistics.median(t.gpu_util for t in _scored(rows) if t.model != r.model)
        out["default"].append((r.model, default, float(r.gpu_util), _long(r)))
        out["constant"].append((r.model, constant, float(r.gpu_util), _long(r)))
    return out


def _repeats(datasets: Sequence[Any]) -> list[tuple[str, float, float, float]]:
    """Jobs measured alone in more than one dataset (runs of separate sessions): model, window (s) of the
    first run and the two readings."""
    seen: dict[tuple, Any] = {}
    out = []
    for d in datasets:
        for r in d.isolated:
            if r.gpu_util is None:
                continue
            if r.key in seen:
                first = seen[r.key]
                out.append((r.model, STEPS * first.step_time_s, float(first.gpu_util), float(r.gpu_util)))
            else:
                seen[r.key] = r
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--sharing", default="timeslice")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    datasets = read_datasets(args.dirs)
    rows, scored_all = fitted_and_scored_rows(datasets, args.sharing)
    scored = _scored(scored_all)
    plain: dict[str, list[tuple]] = {f: [] for f in FORMS}
    nested: list[tuple] = []
    picks: dict[str, str] = {}
    for model in sorted({r.model for r in scored}):
        train = [r for r in rows if r.model != model]
        held = [r for r in scored if r.model == model]
        step = iso.fit_step(train)
        for f in FORMS:
            plain[f] += _errors(f, step, train, held)
        # inner choice on the training models alone (the step model of this outer fold)
        inner = {f: statistics.fmean(abs(q - m) for im in sorted({r.model for r in _scored(train)})
                                     for _, q, m, _ in _errors(f, step, [r for r in train if r.model != im],
                                                            [r for r in _scored(train) if r.model == im]))
                 for f in FORMS}
        picks[model] = min(FORMS, key=inner.__getitem__)
        nested += _errors(picks[model], step, train, held)
    per_form = {f: _summary(e) for f, e in plain.items()}
    rules = {f: _summary(e) for f, e in _baselines(datasets, rows, scored).items()}
    repeats = _repeats(datasets)
    shipped = {r[0]: 100.0 * abs(r[1] / r[2] - 1.0) for r in plain[resources.UTIL_FORM]}
    out = {"lomo_per_form": per_form, "nested": _summary(nested), "picks": picks, "rules": rules,
           "shipped_ape_per_model": shipped,
           "repeats": [{"model": m, "window_s": w, "first": a, "second": b} for m, w, a, b in repeats]}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for name, got in [*per_form.items(), ("nested", _summary(nested)), *rules.items()]:
        print(f"  {name:<14} MAPE {got['mape']:6.1f}%  points {got['points']:5.1f}  "
              f"median {got['median_ape']:5.1f}%  "
              f"MAPE of readings >= 5% {got['mape_readings_from_5pct']:5.1f}%  (n={got['n']}); "
              f"windows >= {LONG_WINDOW_S} s {got['mape_long_windows']:5.1f}% (n={got['n_long']})")
    print("  picks:", picks)
    worst = max(shipped, key=shipped.__getitem__)
    print(f"  {resources.UTIL_FORM}: {worst} alone adds {shipped[worst] / len(shipped):.1f} points to the "
          f"MAPE (its error {shipped[worst]:.0f}%)")
    for m, w, a, b in repeats:
        print(f"  repeat {m:<14} window {w:5.2f} s  readings {a:5.1f}% and {b:5.1f}%  "
              f"({100.0 * abs(a / b - 1.0):.0f}% / {100.0 * abs(b / a - 1.0):.0f}% apart)")
    long_label = f"windows >= {LONG_WINDOW_S} s"
    for label, keep in (("all", lambda w: True), (long_label, lambda w: w >= LONG_WINDOW_S)):
        apes = [100.0 * abs(x / y - 1.0) for _, w, a, b in repeats if keep(w) for x, y in ((a, b), (b, a))]
        if apes:
            print(f"  repeat readings, {label}: MAPE either way {statistics.fmean(apes):.1f}% "
                  f"(median {statistics.median(apes):.1f}%, {len(apes) // 2} jobs)")


if __name__ == "__main__":
    main()
