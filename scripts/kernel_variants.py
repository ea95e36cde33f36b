"""Leave-one-GPU-out of a variant of the kernel model's features, on NeuSight's kernels and iteration labels.

Usage: ``python scripts/kernel_variants.py [CLASSES=FEATURES ...] [--no-sm-fix] [--no-traces] [--trace-weight=W]
[--high-power-only] [--leave-model-out]``

``CLASSES`` is one op class or several joined by ``+``; ``FEATURES`` a comma-separated list of names from
``kernels.FEATURES``, where ``BASE`` stands for its first twelve and ``SHAPE`` for ``kernels.SHAPE_FEATURES``;
classes not named keep ``kernels.CLASS_FEATURES``. ``--no-sm-fix`` takes the Tesla P4's SM count from
NeuSight's device config (40) instead of 20; ``--no-traces`` leaves the kernels measured inside whole
models (``neusight.trace_kernel_samples``) out of the fits, ``--trace-weight=W`` weighs each of them as W
microbenchmark rows (default 1); ``--high-power-only`` fits a held-out GPU of 150 W or more
on the other GPUs of 150 W or more only; ``--leave-model-out`` adds the labels' MAPE when the traces of
the label's own model also leave the fit (``labels_leave_model_out``). Prints JSON: per op class the kernel MAPE (per held-out GPU:
MAPE and median predicted/measured), and the iteration labels' MAPE as ``predict eval-kernels`` reports
it. It reproduces every variant in the README's kernel rows; with no arguments, ``predict eval-kernels``.
"""
import json
import sys

from dltsched.predictors.steptime import kernels as kn
from dltsched.predictors.steptime import neusight as ns

HIGH_POWER_W = 150.0
args = sys.argv[1:]
for arg in args:
    if arg.startswith("--trace-weight="):
        continue
    if arg.startswith("--"):
        if arg not in ("--no-sm-fix", "--no-traces", "--high-power-only", "--leave-model-out"):
            sys.exit(f"{arg}: not understood; --no-sm-fix, --no-traces, --trace-weight=W, --high-power-only "
                     "or --leave-model-out")
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

gpus = {g.id: g for g in kn.neusight_gpus().values()}
samples = kn.neusight_kernels()
traced = [] if "--no-traces" in args else ns.trace_kernel_samples()
weight = float(next((a.split("=", 1)[1] for a in args if a.startswith("--trace-weight=")), 1.0))
models: dict[str, kn.KernelModel] = {}
if "--high-power-only" in args:
    table: dict[str, dict] = {}
    for family in sorted({kn.gpu_family(s.gpu) for s in samples}):
        held = sorted({s.gpu for s in samples if kn.gpu_family(s.gpu) == family})
        high = gpus[held[0]].tdp_w >= HIGH_POWER_W
        def keep(s: kn.KernelSample, family: str = family, high: bool = high) -> bool:
            return kn.gpu_family(s.gpu) != family and (not high or gpus[s.gpu].tdp_w >= HIGH_POWER_W)

        fitted = [s for s in samples if keep(s)]
        model = kn.fit(fitted, gpus, extra=[s for s in traced if keep(s)], extra_weight=weight)
        for g in held:
            models[g] = model
            for cls in kn.OP_CLASSES:
                test = [s for s in samples if s.gpu == g and s.kernel.op_class == cls]
                if test:
                    kn._score(table, cls, g, model, gpus, test,  # noqa: SLF001 - the same scoring
                              [s for s in fitted if s.kernel.op_class == cls])
    kernels = {cls: {"mape": sum(v["mape"] * v["n"] for v in e["per_gpu"].values()) / sum(v["n"] for v in
                                                                                            e["per_gpu"].values()),
                     "per_gpu": e["per_gpu"]} for cls, e in table.items()}
else:
    kernels = kn.leave_one_gpu_out(samples, gpus, models, extra=traced, extra_weight=weight)
labels = ns.evaluate_labels(ns.read_labels(), models, gpus)
lomo: dict[str, float] = {}
if "--leave-model-out" in args:
    apes: dict[str, list[float]] = {"all": [], "train": [], "inference": []}
    fitted_lomo: dict[tuple[str, str], kn.KernelModel] = {}
    for lb in ns.read_labels():
        key = (kn.gpu_family(lb.gpu), lb.model)
        if key not in fitted_lomo:
            extra = [s for s in ns.trace_kernel_samples(skip_models=(lb.model,)) if kn.gpu_family(s.gpu) != key[0]]
            fitted_lomo[key] = kn.fit([s for s in samples if kn.gpu_family(s.gpu) != key[0]], gpus, extra=extra,
                                      extra_weight=weight)
        ape = abs(ns.predict_label(lb, fitted_lomo[key], gpus[lb.gpu], floor=False) - lb.e2e_s) / lb.e2e_s * 100
        for name in ("all", "train" if lb.train else "inference"):
            apes[name].append(ape)
    lomo = {f"{k}_body_mape": round(sum(v) / len(v), 1) for k, v in apes.items()}
print(json.dumps({
    "features": {c: list(kn.CLASS_FEATURES[c]) for c in kn.OP_CLASSES},
    "kernels": {c: {"mape": round(v["mape"], 2), "per_gpu": {g: [round(x["mape"], 1), round(x["median_ratio"], 2)]
                                                             for g, x in v["per_gpu"].items()}}
                for c, v in kernels.items()},
    "labels": {k: {a: round(b, 1) for a, b in v.items()} for k, v in labels.items() if k not in ("rows", "per_gpu")},
    "labels_per_gpu": {g: {a: round(b, 1) for a, b in v.items()} for g, v in labels["per_gpu"].items()},
    "labels_leave_model_out": lomo,
}, indent=1))
