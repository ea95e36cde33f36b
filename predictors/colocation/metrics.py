"""Evaluation of group predictors: MAPE of speed, memory and GPU utilisation, overall and per model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dltsched.predictors.colocation.features import Group, group_of
from dltsched.predictors.colocation.samples import ColocDataset, ColocSample


@dataclass(frozen=True, slots=True)
class GroupPrediction:
    """Predicted speed of each job, and the group's memory (MiB) and GPU utilisation (%)."""

    speeds: tuple[float, ...]
    memory_mib: float | None = None
    gpu_util: float | None = None


class GroupPredictor(Protocol):
    """What every co-location model here offers: predictions for groups, given isolated profiles."""

    def predict(self, groups: Sequence[Group], data: ColocDataset) -> list[GroupPrediction]:
        """One prediction per group; ``data.isolated`` supplies the isolated profiles."""
        ...


def mape(predicted: Sequence[float], actual: Sequence[float]) -> float | None:
    """Mean absolute percentage error in percent (``None`` for no pairs)."""
    if not actual:
        return None
    return 100.0 * sum(abs(p - a) / abs(a) for p, a in zip(predicted, actual, strict=True)) / len(actual)


def scores(samples: Sequence[ColocSample], preds: Sequence[GroupPrediction]) -> dict[str, float | None]:
    """Speed, memory and utilisation MAPE of ``preds`` against the aligned measured ``samples`` (memory and
    utilisation over the samples where both sides have them)."""
    sp, sa, mp, ma, up, ua = [], [], [], [], [], []
    for pred, s in zip(preds, samples, strict=True):
        sp.extend(pred.speeds)
        sa.extend(s.speeds)
        if s.memory_mib is not None and pred.memory_mib is not None:
            mp.append(pred.memory_mib)
            ma.append(s.memory_mib)
        if s.gpu_util is not None and pred.gpu_util is not None:
            up.append(pred.gpu_util)
            ua.append(s.gpu_util)
    return {"speed_mape": mape(sp, sa), "memory_mape": mape(mp, ma), "util_mape": mape(up, ua)}


def _scores(preds: Sequence[GroupPrediction], data: ColocDataset) -> dict[str, float | int | None]:
    return {"n": len(data.samples), **scores(data.samples, preds)}


def evaluate(predictor: GroupPredictor, data: ColocDataset) -> dict[str, object]:
    """Scores over every sample of ``data`` and per model (groups containing that model)."""
    preds = predictor.predict([group_of(s) for s in data.samples], data)
    out: dict[str, object] = dict(_scores(preds, data))
    per_model = {}
    for model in data.models():
        idx = [i for i, s in enumerate(data.samples) if model in s.models]
        per_model[model] = _scores([preds[i] for i in idx], data.subset(data.samples[i] for i in idx))
    out["per_model"] = per_model
    return out
