"""A synthetic profile dataset written in ``dltsched profile``'s own format, from known calibration
parameters."""

from __future__ import annotations

import json
import math
import random

import pytest

from dltsched.predictors.calibration import groups as grp
from dltsched.predictors.calibration import isolated as iso
from dltsched.predictors.calibration import resources as res

#: (model, dataset, batch): a mix of conv, GEMM and launch-bound jobs
JOBS = (("resnet18", "cifar10", 64), ("vgg16", "cifar10", 64), ("mobilenet_v2", "cifar10", 128),
        ("lstm_lm", "wikitext2", 20), ("neumf", "movielens", 1024), ("dcgan", "lsun", 64),
        ("pointnet", "shapenet", 32), ("transformer", "multi30k", 32))
#: the "true" parameters the synthetic GPU follows
TRUE_STEP = {"s_conv": 1.4, "s_gemm": 1.1, "s_vector": 0.7, "s_optimizer": 1.6,
             "dispatch_us": 11.0, "fixed_s": 0.0012}
TRUE_MEMORY = {"context_mib": 1200.0, "scale": 1.0, "rnn": 0.0}
TRUE_SPEED = {"t_both": 0.55, "t_partner": 0.35, "t_any": 0.05}
SHARED_MIB = 600.0
GPU = "h200"


def write_profiles(folder, sharing: str, noise: float, seed: int) -> None:
    from dltsched.predictors.profiling.dataset import write_dataset

    rng = random.Random(seed)
    isolated, members = [], {}
    for model, dataset, batch in JOBS:
        f = iso.job_features(model, dataset, batch, False, GPU, frozenset({"conv"}))
        step = iso.step_seconds(TRUE_STEP, f, batch) * math.exp(rng.gauss(0.0, noise))
        gmem = res.memory_mib(TRUE_MEMORY, f)
        busy = min(1.0, iso.gpu_seconds(TRUE_STEP, f) / step)
        util = 100.0 * busy
        members[model] = grp.Member(busy, gmem, util)
        isolated.append({"model": model, "dataset": dataset, "gpu": GPU, "batch_size": batch, "num_gpus": 1,
                         "step_time_s": step, "amp": 0, "optimizer": "sgd", "peak_memory_mib": gmem - 1400.0,
                         "gpu_util": util, "gmem_used_mib": gmem, "scope": "compute", "n": 30,
                         "step_time_ci95_low_s": step * 0.99, "step_time_ci95_high_s": step * 1.01,
                         "stop": "precision", "gmem_util": 100.0 * gmem / 143771.0, "gmem_mib": gmem})
    groups = []
    names = [j[0] for j in JOBS]
    combos = ([(a, b) for i, a in enumerate(names) for b in names[i:]][::4]
              + [tuple(names[:3]), tuple(names[3:6])])
    for combo in combos:
        ms = [members[m] for m in combo]
        speeds = [s * math.exp(rng.gauss(0.0, noise)) for s in grp.speeds(TRUE_SPEED, ms)]
        jobs = [{"model": m, "dataset": dict((j[0], j[1]) for j in JOBS)[m],
                 "batch_size": dict((j[0], j[2]) for j in JOBS)[m], "amp": 0, "speed": s}
                for m, s in zip(combo, speeds, strict=True)]
        gmem = grp.group_memory_mib(SHARED_MIB, ms)
        groups.append({"group": "+".join(combo), "jobs": jobs, "gpu": GPU, "sharing": sharing,
                       "gpu_util": grp.group_util_pct(1.0, ms), "gmem_util": 100.0 * gmem / 143771.0,
                       "gmem": gmem, "gmem_source": "nvml"})
    record = {"command": f"dltsched profile --sharing {sharing} --out x", "gpu": GPU, "sharing": sharing,
              "scope": "compute", "tf32_cudnn": "True", "tf32_matmul": "False", "device_name": "NVIDIA H200"}
    write_dataset(folder, isolated, groups, record)


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory):
    """``h200/`` (time-sliced, 3% noise) with ``h200/mps/`` (exact, slower partners: a different regime)."""
    root = tmp_path_factory.mktemp("profiles") / "h200"
    write_profiles(root, "timeslice", 0.03, 0)
    write_profiles(root / "mps", "mps", 0.0, 1)
    # the MPS regime slows partners less: rewrite its speeds as faster ones
    raw = json.loads((root / "mps" / "groups.json").read_text())
    for g in raw["groups"]:
        for j in g["jobs"]:
            j["speed"] = min(1.0, j["speed"] * 1.4)
    (root / "mps" / "groups.json").write_text(json.dumps(raw))
    return root
