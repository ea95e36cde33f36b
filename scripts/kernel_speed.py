"""Speed of step-time predictions with the kernel step model, beside the default model in the same run.

Usage: ``python scripts/kernel_speed.py [KERNEL_MODEL_JSON]`` (default: the shipped kernel_model.json; pass
an older one, e.g. from ``git show REV:predictors/steptime/kernel_model.json``, to compare two kernel
models in one session). Times the one-off tabling of every zoo graph on six GPUs and then 10,000 distinct
(job, GPU) predictions (a new batch size each: ``bench predict``'s distinct-pairs loop), for
``gpu_model="groups"``, ``"auto"`` (the default) and ``"kernels"``, and prints JSON.
"""
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from dltsched.engine.domain.model import Job
from dltsched.predictors.steptime import DeletePopStepTime, kernelstep
from dltsched.predictors.steptime import kernels as kn
from dltsched.predictors.zoo import zoo_models

if len(sys.argv) > 1:
    other = kn.KernelModel.from_json(json.loads(Path(sys.argv[1]).read_text()))
    kn.load_kernel_model = lambda path=None: other  # what the step model loads
    kernelstep.load_kernel_model = kn.load_kernel_model
gpus = ("k80", "p100", "v100", "t4", "a100-40gb", "h100")
jobs = [Job(id=m, model=m, batch_size=8 + 8 * i, total_iterations=1.0) for i, m in enumerate(zoo_models())]
out = {}
for gpu_model in ("groups", "auto", "kernels"):
    predictor = DeletePopStepTime(gpu_model=gpu_model)
    start = time.perf_counter()
    for job in jobs:
        for gpu in gpus:
            predictor.step_time_s(job, gpu)
    tabling = time.perf_counter() - start
    distinct = [(replace(jobs[i % len(jobs)], batch_size=100_000 + i), gpus[i % len(gpus)])
                for i in range(10_000)]
    start = time.perf_counter()
    for job, gpu in distinct:
        predictor.step_time_s(job, gpu)
    out[gpu_model] = {"tabling_s": round(tabling, 2),
                      "distinct_10000_s": round(time.perf_counter() - start, 3)}
print(json.dumps({"kernel_model": sys.argv[1] if len(sys.argv) > 1 else "shipped", **out}))
