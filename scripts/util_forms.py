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
  lasts 0.75 s or more;
- ``classes_launch``: 100 min(1, (sum over op classes of a_c s_c K_c + b n) / step), the kernel seconds of
  each op class (``K_c``, scaled by the step model's ``s_c``) with a factor of its own and a busy time per
  launch: four parameters. Added after seeing the other forms' errors on the profiles of 2026-11-27 (the
  step model's split of host and GPU time does not give NVML's busy time), so its figures, the nested one
  included, are not a prediction made before seeing the data. Not what the calibration ships.

Beside them on the same rows: the uncalibrated default (the engine's busy share of its step), the constant
(the median of the other models' readings) and the family mean (the mean reading of the other models of the
same family, the constant where there is none). A per-model mean does not exist for a model never profiled:
with one job per model it is the constant. Every figure is also given on the rows whose utilisation window
lasts 0.75 s and 2 s or more (the window the profile records, ``util_window_s``, else its 30 timed steps):
NVML averages utilisation over up to a second, so a window of a few tens of milliseconds reads mostly what the
GPU did before it.

Several datasets may hold the same job (``../shared/data/h200`` and a later profile of the same jobs, say):
each job is scored once, its utilisation from its readings on the most NVML samples
(:func:`dltsched.predictors.calibration.rows.with_best_utilisation`, as ``dltsched calibrate`` reads them).
Every pair of readings of the same job in two folders gives the repeat-measurement spread of the readings
themselves, by the shorter window of the two and by whether both rest on NVML's timestamped samples.

Each is fitted on errors in percentage points. Nested: for each held-out model the form is chosen by
leave-one-model-out (mean points) on the other models, fitted on them and scores the held-out model.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from dltsched.predictors.calibration import isolated as iso
from dltsched.predictors.calibration import resources
from dltsched.predictors.calibration.data import dataset_folders, read_datasets, read_folder
from dltsched.predictors.calibration.model import fitted_and_scored_rows

FORMS = ("power", "ratio", "ratio_launch", "busy", "ratio_long", "classes_launch")
#: the op-class groups of the ``classes_launch`` form
CLASSES = ("conv", "gemm", "vector")
#: timed steps of a profile that does not say (the profiler's minimum) and the window (s) from which NVML's
#: utilisation is read over the timed steps alone (it averages over up to a second); the longer windows
STEPS, LONG_WINDOW_S, LONGER_WINDOW_S = 30, 0.75, 2.0


def _window_s(r: Any) -> float:
    """The seconds a reading's utilisation window covered: as recorded, else its 30 timed steps."""
    return r.util_window_s if r.util_window_s is not None else STEPS * r.step_time_s


def _long(r: Any) -> bool:
    return _window_s(r) >= LONG_WINDOW_S


def _inputs(step: dict[str, float], rows: Sequence[Any]) -> tuple[np.ndarray, ...]:
    gpu = np.array([iso.gpu_seconds(step, r.features, r.scope) for r in rows])
    pred = np.array([iso.step_seconds(step, r.features, r.batch, r.scope) for r in rows])
    launches = np.array([r.features["launches"] for r in rows])
    return gpu, pred, launches


def _predict(form: str, p: dict[str, float], step: dict[str, float], rows: Sequence[Any]) -> np.ndarray:
    gpu, pred, launches = _inputs(step, rows)
    if form == "classes_launch":
        kernels = np.array([sum(p[f"a_{c}"] * step[f"s_{c}"] * r.features[f"K_{c}"] for c in CLASSES)
                            for r in rows])
        return 100.0 * np.minimum(1.0, (kernels + p["launch_us"] * 1e-6 * launches) / np.maximum(pred, 1e-12))
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
    names: tuple[str, ...] = ("k", "launch_us")
    if form == "classes_launch":
        names = (*(f"a_{c}" for c in CLASSES), "launch_us")
    prior = {"k": 1.0, "launch_us": 2.0, **{f"a_{c}": 1.0 for c in CLASSES}}
    x0 = np.log([prior[n] for n in names])
    measured = np.array([float(r.gpu_util) for r in got])

    def residuals(x: np.ndarray) -> np.ndarray:
        p = {n: float(v) for n, v in zip(names, np.exp(x), strict=True)}
        return np.concatenate([(_predict(form, p, step, got) - measured) / 100.0, 0.1 * (x - x0)])

    return {n: float(v) for n, v in zip(names, np.exp(iso.robust_fit(residuals, x0)), strict=True)}


def _errors(form: str, step: dict[str, float], train: Sequence[Any], held: Sequence[Any]) -> list[tuple]:
    p = _fit(form, step, train)
    pred = _predict(form, p, step, held)
    return [(r.model, float(q), float(r.gpu_util), _window_s(r)) for r, q in zip(held, pred, strict=True)]


def _scored(rows: Sequence[Any]) -> list[Any]:
    return [r for r in rows if r.gpu_util and r.scope != "fwd_bwd"]


def _summary(errs: Sequence[tuple]) -> dict[str, float]:
    ape = [100.0 * abs(q / m - 1.0) for _, q, m, _ in errs]
    low = [100.0 * abs(q / m - 1.0) for _, q, m, _ in errs if m >= 5.0]
    long = [100.0 * abs(q / m - 1.0) for _, q, m, w in errs if w >= LONG_WINDOW_S]
    longer = [100.0 * abs(q / m - 1.0) for _, q, m, w in errs if w >= LONGER_WINDOW_S]
    return {"mape": statistics.fmean(ape), "points": statistics.fmean(abs(q - m) for _, q, m, _ in errs),
            "median_ape": statistics.median(ape), "max_ape": max(ape),
            "mape_readings_from_5pct": statistics.fmean(low) if low else float("nan"),
            "mape_long_windows": statistics.fmean(long) if long else float("nan"), "n_long": len(long),
            "mape_windows_from_2s": statistics.fmean(longer) if longer else float("nan"),
            "n_windows_from_2s": len(longer), "n": len(errs)}


def _baselines(datasets: Sequence[Any], rows: Sequence[Any], scored: Sequence[Any]) -> dict[str, list[tuple]]:
    """The uncalibrated default (the engine's busy share of its step), the constant (the median of the other
    models' readings) and the family mean (module docstring) on the same held-out rows."""
    from dltsched.engine.domain.catalog import model_catalog
    from dltsched.engine.domain.model import Job
    from dltsched.predictors.steptime import DeletePopStepTime

    engine, gpu = DeletePopStepTime(), datasets[0].gpu
    dataset = {(r.model, r.batch_size): r.dataset for d in datasets for r in d.isolated}
    out: dict[str, list[tuple]] = {"default": [], "constant": [], "family_mean": []}
    for r in scored:
        job = Job(id="u", model=r.model, dataset=dataset[r.model, r.batch], batch_size=r.batch,
                  total_iterations=1.0)
        b = engine.breakdown(job, gpu, scope=r.scope)
        default = 100.0 * min(1.0, (b.compute_s + b.memory_s) / b.step_time_s)
        others = [t for t in _scored(rows) if t.model != r.model]
        constant = statistics.median(t.gpu_util for t in others)
        family = model_catalog().get(r.model).family
        same = [t.gpu_util for t in others if model_catalog().get(t.model).family == family]
        for name, value in (("default", default), ("constant", constant),
                            ("family_mean", statistics.fmean(same) if same else constant)):
            out[name].append((r.model, value, float(r.gpu_util), _window_s(r)))
    return out


def _repeats(dirs: Sequence[str], sharing: str) -> list[dict[str, Any]]:
    """Every pair of readings of the same job alone in two folders under ``dirs`` (runs of separate
    sessions), each folder read as it is: model, the two readings, their windows (s) and whether both rest on
    NVML's timestamped samples."""
    seen: dict[tuple, list[Any]] = {}
    for folder in dataset_folders(dirs):
        data = read_folder(folder)
        for r in data.isolated:
            if r.gpu_util is not None and r.scope != "fwd_bwd":
                seen.setdefault((data.gpu, r.key), []).append(r)
    out = []
    for (_, key), got in sorted(seen.items()):
        for a, b in itertools.combinations(got, 2):
            out.append({"model": key[0], "first": float(a.gpu_util), "second": float(b.gpu_util),
                        "window_s": min(_window_s(a), _window_s(b)),
                        "windows_s": [_window_s(a), _window_s(b)],
                        "sampled": bool(a.util_samples and b.util_samples)})
    return out


#: window bins of repeat readings (s)
REPEAT_BINS = (("< 0.75 s", 0.0, LONG_WINDOW_S), ("0.75-2 s", LONG_WINDOW_S, LONGER_WINDOW_S),
               (">= 2 s", LONGER_WINDOW_S, float("inf")))


def _bin(window_s: float) -> str:
    return next(label for label, low, high in REPEAT_BINS if low <= window_s < high)


def _repeat_spread(pairs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The relative difference of repeat readings (either way, so symmetric) by the window bins of the two
    readings, the pairs of NVML-sampled readings apart from the others."""
    out = []
    labels = [f"{a} and {b}" for i, (a, _, _) in enumerate(REPEAT_BINS) for b, _, _ in REPEAT_BINS[i:]]
    for sampled in (True, False):
        for label in labels:
            got = [p for p in pairs if p["sampled"] == sampled
                   and " and ".join(_bin(w) for w in sorted(p["windows_s"])) == label]
            apes = [100.0 * abs(x / y - 1.0) for p in got
                    for x, y in ((p["first"], p["second"]), (p["second"], p["first"]))]
            if apes:
                out.append({"sampled": sampled, "windows": label, "pairs": len(got),
                            "jobs": len({p["model"] for p in got}), "mape_either_way": statistics.fmean(apes),
                            "median": statistics.median(apes), "max": max(apes)})
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
    rule_errs = _baselines(datasets, rows, scored)
    rules = {f: _summary(e) for f, e in rule_errs.items()}
    repeats = _repeats(args.dirs, args.sharing)
    spread = _repeat_spread(repeats)
    per_model = {name: {m: {"predicted": q, "measured": g, "window_s": w} for m, q, g, w in errs}
                 for name, errs in (*plain.items(), ("nested", nested), *rule_errs.items())}
    shipped = {r[0]: 100.0 * abs(r[1] / r[2] - 1.0) for r in plain[resources.UTIL_FORM]}
    out = {"lomo_per_form": per_form, "nested": _summary(nested), "picks": picks, "rules": rules,
           "shipped_ape_per_model": shipped, "per_model": per_model, "repeats": repeats,
           "repeat_spread": spread}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for name, got in [*per_form.items(), ("nested", _summary(nested)), *rules.items()]:
        print(f"  {name:<14} MAPE {got['mape']:6.1f}%  points {got['points']:5.1f}  "
              f"median {got['median_ape']:5.1f}%  max {got['max_ape']:5.1f}%  "
              f"readings >= 5% {got['mape_readings_from_5pct']:5.1f}%  (n={got['n']}); "
              f"windows >= {LONG_WINDOW_S} s {got['mape_long_windows']:5.1f}% (n={got['n_long']}), "
              f">= {LONGER_WINDOW_S:.0f} s {got['mape_windows_from_2s']:5.1f}% "
              f"(n={got['n_windows_from_2s']})")
    print("  picks:", picks)
    worst = max(shipped, key=shipped.__getitem__)
    print(f"  {resources.UTIL_FORM}: {worst} alone adds {shipped[worst] / len(shipped):.1f} points to the "
          f"MAPE (its error {shipped[worst]:.0f}%)")
    for m in sorted(per_model[resources.UTIL_FORM]):
        got = {name: per_model[name][m]["predicted"] for name in (resources.UTIL_FORM, "default", "constant")}
        row = per_model[resources.UTIL_FORM][m]
        print(f"  {m:<14} window {row['window_s']:5.2f} s  measured {row['measured']:5.1f}%  "
              + "  ".join(f"{name} {v:5.1f}%" for name, v in got.items()))
    for s in spread:
        print(f"  repeat readings, {'NVML samples' if s['sampled'] else 'other'}, windows {s['windows']}: "
              f"{s['mape_either_way']:.1f}% either way (median {s['median']:.1f}%, max {s['max']:.1f}%; "
              f"{s['pairs']} pairs of {s['jobs']} jobs)")


if __name__ == "__main__":
    main()
