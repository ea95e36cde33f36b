"""Cross-validated figures of E-GGAT and the baselines, and training of the shipped model.

``cross_validate`` pools the test predictions of every fold of one split kind, so each figure is
comparable across predictors (same folds, same samples).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dltsched.predictors.colocation.baselines import (
    AnalyticContention,
    ConstantBaseline,
    GbtBaseline,
    PerModelMeanBaseline,
)
from dltsched.predictors.colocation.metrics import evaluate
from dltsched.predictors.colocation.samples import ColocDataset, read_gavel_samples, read_lucid_samples
from dltsched.predictors.colocation.splits import folds

BASELINES: dict[str, Callable[[], Any]] = {
    "constant": ConstantBaseline,
    "per_model_mean": PerModelMeanBaseline,
    "analytic": AnalyticContention,
    "gbt": GbtBaseline,
}


def read_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> ColocDataset:
    """``gavel`` or ``lucid`` from the shared data folder."""
    return read_gavel_samples(data_dir=data_dir) if name == "gavel" else read_lucid_samples(data_dir=data_dir)


def cross_validate(data: ColocDataset, kind: str, factory: Callable[[], Any], seed: int = 0) -> dict[str, Any]:
    """MAPEs over the pooled test folds of one split kind (weighted by test groups), and train seconds."""
    sums: dict[str, list[float]] = {"speed_mape": [0.0, 0.0], "memory_mape": [0.0, 0.0], "util_mape": [0.0, 0.0]}
    train_s = 0.0
    held_out = []
    for split in folds(data, kind, seed):
        start = time.perf_counter()
        model = factory().fit(split.train)
        train_s += time.perf_counter() - start
        scores = evaluate(model, split.test)
        held_out.append(split.held_out)
        for key, acc in sums.items():
            if scores[key] is not None:
                acc[0] += float(scores[key]) * len(split.test)  # type: ignore[arg-type]
                acc[1] += len(split.test)
    out: dict[str, Any] = {k: (round(v[0] / v[1], 2) if v[1] else None) for k, v in sums.items()}
    out.update(split=kind, folds=held_out, train_s=round(train_s, 1))
    return out


def train_default(out_dir: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None,
                  dataset: str = "gavel", epochs: int = 120, seed: int = 0, max_jobs: int = 3,
                  figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train E-GGAT on every sample of ``dataset``; write the checkpoint and the exported table.

    The table covers every job type of the data on every GPU with isolated profiles (for Gavel:
    K80, P100 measured, V100 predicted from its spec sheet), groups of 2..``max_jobs``.
    """
    from dltsched.predictors.colocation.table import DEFAULT_TABLE, export_table
    from dltsched.predictors.colocation.train import EggatConfig, EggatPredictor

    data = read_dataset(dataset, data_dir)
    start = time.perf_counter()
    model = EggatPredictor(EggatConfig(epochs=epochs, seed=seed, max_jobs=max_jobs)).fit(data)
    train_s = time.perf_counter() - start
    gpus = sorted({gpu for gpu, _ in data.isolated})
    jobs = sorted({job for _, job in data.isolated})
    record = {"data": dataset, "samples": len(data), "split": "all samples (figures: see 'figures')",
              "seed": seed, "epochs": epochs, "train_s": round(train_s, 1), "gpus_trained": list(data.gpus()),
              "gpus_tabulated": gpus, "figures": figures or {},
              "license": "Gavel data, MIT" if dataset == "gavel" else "Lucid data, S-Lab non-commercial: do not ship"}
    model.record = record
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / f"eggat_{dataset}.safetensors")
    table = export_table(model, gpus, jobs, dict(data.isolated), max_jobs, record)
    table.save(out / (DEFAULT_TABLE if dataset == "gavel" else f"table_{dataset}.json"))
    return record
