"""Where the NeuSight iteration labels' error comes from: per held-out GPU and op class, the traced
operators' measured time (forward, and backward for training) beside the sum of their predicted kernel
bodies (kernel model fitted without that GPU, as ``predict eval-kernels``) and their roofline time.

Usage: ``python scripts/label_op_classes.py [--no-traces]`` (``--no-traces``: the kernel model without the
kernels timed inside whole models). Prints JSON: ``{gpu: {op class: {measured_s, predicted_over_measured,
roofline_over_measured}}}`` summed over every label of that GPU (each layer-0 op counted ``num_layer``
times); ``none`` holds the ops that launch no kernel (their measured time is the per-call cost alone).
"""
import csv
import json
import sys

from dltsched.instances.datadir import data_file
from dltsched.predictors.steptime import kernels as kn
from dltsched.predictors.steptime import neusight as ns

gpus = {g.id: g for g in kn.neusight_gpus().values()}
samples = kn.neusight_kernels()
traced = [] if "--no-traces" in sys.argv else ns.trace_kernel_samples()
models: dict[str, kn.KernelModel] = {}
for family in sorted({kn.gpu_family(s.gpu) for s in samples}):
    model = kn.fit([s for s in samples if kn.gpu_family(s.gpu) != family], gpus,
                   extra=[s for s in traced if kn.gpu_family(s.gpu) != family])
    for g in gpus:
        if kn.gpu_family(g) == family:
            models[g] = model
csv.field_size_limit(1 << 30)
sums: dict[str, dict[str, list[float]]] = {}
base = data_file("neusight", "labels")
for folder, gpu in sorted(ns.LABEL_GPUS.items()):
    for label in sorted((base / folder).glob("*.json")):
        trace = label.with_suffix(".csv")
        if "-fusion" in label.stem or not trace.exists():
            continue
        train = "-train-" in label.stem
        layers = json.loads(label.read_text())["num_layer"]
        dtypes: dict[str, str] = {}
        with trace.open(newline="") as fh:
            for row in csv.DictReader(fh):
                dtypes[row["Name"]] = row.get("dtype", "")
                in_layer = bool(ns._LAYER.search(row["meta"]))  # noqa: SLF001 - the reader's own layer test
                if not in_layer and ns._ANY_LAYER.search(row["meta"]):  # noqa: SLF001
                    continue
                count = layers if in_layer else 1
                kernels = ns.op_kernels(row, train, dtypes)
                measured = (float(row["fw_latency"] or 0) + (float(row["bw_latency"] or 0) if train
                                                             else 0.0)) * 1e-3
                cls = kernels[0].op_class if kernels else "none"
                pred = float(models[gpu].predict_s(kernels, gpus[gpu], floor=False).sum()) if kernels else 0.0
                roof = sum(max(kn.roofline_s(k, gpus[gpu])) for k in kernels)
                acc = sums.setdefault(gpu, {}).setdefault(cls, [0.0, 0.0, 0.0])
                acc[0] += count * measured
                acc[1] += count * pred
                acc[2] += count * roof
print(json.dumps({g: {c: {"measured_s": round(v[0], 3), "predicted_over_measured": round(v[1] / v[0], 2),
                          "roofline_over_measured": round(v[2] / v[0], 2)} for c, v in sorted(by.items())}
                  for g, by in sorted(sums.items())}, indent=1))
