"""Leave-one-GPU-out of a variant of the kernel model's features, on NeuSight's kernels and iteration labels.

Usage: ``python scripts/kernel_variants.py [CLASSES=FEATURES ...] [--no-sm-fix] [--no-traces]
[--trace-weight=W] [--floor=STAT] [--leave-model-out] [--diagnose] [--inner-floor]``

``CLASSES`` is one op class or several joined by ``+``; ``FEATURES`` a comma-separated list of names from
``kernels.FEATURES``, where ``BASE`` stands for its first twelve and ``SHAPE`` for ``kernels.SHAPE_FEATURES``;
classes not named keep ``kernels.CLASS_FEATURES``. ``--no-sm-fix`` takes the Tesla P4's SM count from
NeuSight's device config (40) instead of 20; ``--no-traces`` leaves the kernels measured inside whole
models (``neusight.trace_kernel_samples``) out of the fits, ``--trace-weight=W`` weighs each of them as W
microbenchmark rows (default 1); ``--floor=STAT`` draws the model's per-call floor from the fitted GPUs'
floors by ``STAT`` (``min``, the shipped ``kernels.FLOOR_STATISTIC``, or ``median``, the one before);
``--leave-model-out`` adds the labels' MAPE when the traces of the label's own model also leave the fit
(``labels_leave_model_out``); ``--diagnose`` adds per op class (``diagnosis``) the same learner's MAPE on a
random 80/20 split within the GPUs (``within_gpu``: every GPU in the fit, each test row with its GPU's own
floor: what the features leave unexplained), the leave-one-GPU-out MAPE with the held-out GPU's own floor
(``own_floor``) and after one best scale per held-out GPU (``best_scale``: what is left once the GPU's level
is known), and the held-out MAPE by the measured latency over the GPU's own floor (``by_latency_over_floor``);
``--inner-floor`` adds (``inner_floor``) per op class the held-out MAPE when each held-out GPU's floor
statistic (lowest, median, 25th percentile or geometric mean of the fitted GPUs' floors) is chosen by an inner
leave-one-GPU-out over the other GPUs, with the statistic picked for each held-out GPU.
Prints JSON: per op class the kernel MAPE (per held-out GPU: MAPE and median predicted/measured), and the
iteration labels' MAPE as ``predict eval-kernels`` reports it. It reproduces every variant in the README's
kernel rows still in the code; with no arguments, ``predict eval-kernels``.
"""
import json
import sys

import numpy as np
from sklearn.model_selection import train_test_split

from dltsched.predictors.steptime import kernels as kn
from dltsched.predictors.steptime import neusight as ns

args = sys.argv[1:]
FLAGS = ("--no-sm-fix", "--no-traces", "--leave-model-out", "--diagnose", "--inner-floor")
for arg in args:
    if arg.startswith(("--trace-weight=", "--floor=")):
        continue
    if arg.startswith("--"):
        if arg not in FLAGS:
            sys.exit(f"{arg}: not understood; {', '.join(FLAGS)}, --trace-weight=W or --floor=STAT")
        continue
    classes, _, names = arg.partition("=")
    feats: list[str] = []
    for name in names.split(","):
        feats += {"BASE": list(kn.FEATURES[:12]), "SHAPE": list(kn.SHAPE_FEATURES)}.get(name, [name])
    unknown = sorted(set(feats) - set(kn.FEATURES)) + sorted(set(classes.split("+")) - set(kn.OP_CLASSES))
    if unknown:
        sys.exit(f"{unknown}: not a feature or op class of kernels.py")
    for cls in classes.split("+"):
        kn.CLASS_FEATURES[cls] = tuple(feats)
if "--no-sm-fix" in args:
    kn.NEUSIGHT_SM_COUNT.clear()
for arg in args:
    if arg.startswith("--floor="):
        if arg[8:] not in kn.FLOOR_STATISTICS:
            sys.exit(f"{arg}: not understood; --floor= one of {', '.join(kn.FLOOR_STATISTICS)}")
        kn.FLOOR_STATISTIC = arg[8:]

gpus = {g.id: g for g in kn.neusight_gpus().values()}
samples = kn.neusight_kernels()
traced = [] if "--no-traces" in args else ns.trace_kernel_samples()
weight = float(next((a.split("=", 1)[1] for a in args if a.startswith("--trace-weight=")), 1.0))
models: dict[str, kn.KernelModel] = {}
kernels = kn.leave_one_gpu_out(samples, gpus, models, extra=traced, extra_weight=weight)


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return round(float(np.mean(np.abs(pred - meas) / meas) * 100.0), 1)


def _best_scale(pred: np.ndarray, meas: np.ndarray) -> float:
    """The scale s minimising the MAPE of s * pred: the median of meas / pred weighted by pred / meas."""
    ratio, w = meas / pred, pred / meas
    order = np.argsort(ratio)
    cum = np.cumsum(w[order])
    return float(ratio[order][np.searchsorted(cum, cum[-1] / 2.0)])


def diagnose() -> dict[str, dict]:
    """Within-GPU split, own-floor and best-scale MAPE per op class (see the module's docstring)."""
    own = kn.floors(samples)
    train, test = train_test_split(samples, test_size=0.2, random_state=0,
                                   stratify=[(s.kernel.op_class, s.gpu) for s in samples])
    within = kn.fit(train, gpus, extra=traced, extra_weight=weight)
    out: dict[str, dict] = {}
    for cls in kn.OP_CLASSES:
        inside = [s for s in test if s.kernel.op_class == cls]
        if not inside:
            continue
        pred_in = np.concatenate([within.predict_s([s.kernel for s in inside if s.gpu == g], gpus[g],
                                                   floor=False)
                                  + own[(cls, g)] for g in sorted({s.gpu for s in inside})])
        meas_in = np.concatenate([[s.latency_s for s in inside if s.gpu == g]
                                  for g in sorted({s.gpu for s in inside})])
        parts: dict[str, list[np.ndarray]] = {"body": [], "floor": [], "meas": [], "pred": [], "scaled": []}
        for g in sorted({s.gpu for s in samples if s.kernel.op_class == cls}):
            mine = [s for s in samples if s.gpu == g and s.kernel.op_class == cls]
            body = models[g].predict_s([s.kernel for s in mine], gpus[g], floor=False)
            meas = np.array([s.latency_s for s in mine])
            pred = body + models[g].floor_s[cls]
            for name, v in (("body", body), ("floor", np.full(len(mine), own[(cls, g)])), ("meas", meas),
                            ("pred", pred), ("scaled", pred * _best_scale(pred, meas))):
                parts[name].append(v)
        b, f, y, pred = (np.concatenate(parts[k]) for k in ("body", "floor", "meas", "pred"))
        bands = {}
        for lo, hi in ((0, 1.5), (1.5, 3), (3, 10), (10, np.inf)):
            m = (y / f >= lo) & (y / f < hi)
            if m.any():
                bands[f"{lo}-{hi}"] = {"n": int(m.sum()), "mape": _mape(pred[m], y[m]),
                                       "median_ratio": round(float(np.median(pred[m] / y[m])), 2)}
        out[cls] = {"within_gpu": _mape(pred_in, meas_in), "own_floor": _mape(b + f, y),
                    "best_scale": _mape(np.concatenate(parts["scaled"]), y), "by_latency_over_floor": bands}
    return out



INNER_STATISTICS = {"min": np.min, "median": np.median, "p25": lambda v: np.percentile(v, 25),
                    "geomean": lambda v: np.exp(np.mean(np.log(v)))}


def _bodies(fitted: list[str], held: str) -> dict[str, tuple[np.ndarray, np.ndarray, list[float]]]:
    """Per op class: predicted bodies and measured latencies on ``held`` of a model fitted on the ``fitted``
    GPU families, and those GPUs' floors of the class."""
    keep = [s for s in samples if kn.gpu_family(s.gpu) in fitted]
    model = kn.fit(keep, gpus, extra=[s for s in traced if kn.gpu_family(s.gpu) in fitted],
                   extra_weight=weight)
    own = kn.floors(keep)
    out = {}
    for cls in kn.OP_CLASSES:
        test = [s for s in samples if kn.gpu_family(s.gpu) == held and s.kernel.op_class == cls]
        if test:
            body = np.concatenate([model.predict_s([s.kernel for s in test if s.gpu == g], gpus[g],
                                                   floor=False)
                                   for g in sorted({s.gpu for s in test})])
            meas = np.concatenate([[s.latency_s for s in test if s.gpu == g]
                                   for g in sorted({s.gpu for s in test})])
            out[cls] = (body, meas, [v for (c, _g), v in own.items() if c == cls])
    return out


def inner_floor() -> dict[str, dict]:
    """Held-out MAPE per op class with the floor statistic chosen by an inner leave-one-GPU-out."""
    families = sorted({kn.gpu_family(s.gpu) for s in samples})
    apes: dict[str, list[np.ndarray]] = {}
    picks: dict[str, dict[str, str]] = {}
    for held in families:
        rest = [f for f in families if f != held]
        scores: dict[str, dict[str, list[float]]] = {}
        for inner in rest:
            for cls, (body, meas, fl) in _bodies([f for f in rest if f != inner], inner).items():
                for name, stat in INNER_STATISTICS.items():
                    scores.setdefault(cls, {}).setdefault(name, []).append(
                        float(np.mean(np.abs(body + stat(fl) - meas) / meas)))
        for cls, (body, meas, fl) in _bodies(rest, held).items():
            best = min(scores[cls], key=lambda n, c=cls: float(np.mean(scores[c][n])))
            picks.setdefault(cls, {})[held] = best
            apes.setdefault(cls, []).append(np.abs(body + INNER_STATISTICS[best](fl) - meas) / meas * 100.0)
    return {cls: {"mape": round(float(np.mean(np.concatenate(v))), 2), "picked": picks[cls]}
            for cls, v in apes.items()}


labels = ns.evaluate_labels(ns.read_labels(), models, gpus)
lomo: dict[str, float] = {}
if "--leave-model-out" in args:
    apes: dict[str, list[float]] = {"all": [], "train": [], "inference": []}
    fitted_lomo: dict[tuple[str, str], kn.KernelModel] = {}
    for lb in ns.read_labels():
        key = (kn.gpu_family(lb.gpu), lb.model)
        if key not in fitted_lomo:
            extra = [s for s in ns.trace_kernel_samples(skip_models=(lb.model,))
                     if kn.gpu_family(s.gpu) != key[0]]
            fitted_lomo[key] = kn.fit([s for s in samples if kn.gpu_family(s.gpu) != key[0]], gpus,
                                      extra=extra, extra_weight=weight)
        ape = abs(ns.predict_label(lb, fitted_lomo[key], gpus[lb.gpu],
                                   floor=False) - lb.e2e_s) / lb.e2e_s * 100
        for name in ("all", "train" if lb.train else "inference"):
            apes[name].append(ape)
    lomo = {f"{k}_body_mape": round(sum(v) / len(v), 1) for k, v in apes.items()}
print(json.dumps({
    "features": {c: list(kn.CLASS_FEATURES[c]) for c in kn.OP_CLASSES},
    "kernels": {c: {"mape": round(v["mape"], 2),
                    "per_gpu": {g: [round(x["mape"], 1), round(x["median_ratio"], 2)]
                                                             for g, x in v["per_gpu"].items()}}
                for c, v in kernels.items()},
    "labels": {k: {a: round(b, 1) for a, b in v.items()} for k, v in labels.items()
               if k not in ("rows", "per_gpu")},
    "labels_per_gpu": {g: {a: round(b, 1) for a, b in v.items()} for g, v in labels["per_gpu"].items()},
    "labels_leave_model_out": lomo,
    "diagnosis": diagnose() if "--diagnose" in args else {},
    "inner_floor": inner_floor() if "--inner-floor" in args else {},
}, indent=1))
