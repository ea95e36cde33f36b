"""A bundle checked on measurements it was not fitted on: ``eval-steptime`` and
``eval-colocation --calibration``.

Step time: each row of a covered GPU type is priced by the bundle at the row's scope (its own profile in the
bundle where there is one: ``source`` says ``measured``), every other row by the default predictor, as
``eval-steptime`` prices it without a bundle. Co-location: each group on a covered GPU type under a sharing
mode the bundle has groups of is priced by the bundle's group models, with the members' isolated profiles of
the evaluated data (``single_data.csv`` beside the file) in place of the bundle's own, as the shipped model is
handed them; every other group by the shipped model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dltsched.predictors.calibration.bundle import CalibrationBundle
from dltsched.predictors.calibration.data import IsolatedRow


def steptime_rows(bundle: CalibrationBundle, measurements: Sequence[Any]) -> dict[str, Any]:
    """MAPE and per-row predictions of ``measurements`` (``steptime.measurements.Measurement``). Rows priced
    by a job's own profile in the bundle (``source`` ``measured``) are in-sample; ``calibrated_mape`` leaves
    them out."""
    import numpy as np

    from dltsched.predictors.calibration.wrap import CalibratedStepTime
    from dltsched.predictors.steptime import DeletePopStepTime
    from dltsched.predictors.steptime.calibrate import evaluate, job_of

    base = DeletePopStepTime()
    priced = CalibratedStepTime(base, bundle)
    rows = []
    for m in measurements:
        job = job_of(m)
        if bundle.for_gpu(m.gpu) is None or m.kernel_time:
            row = dict(evaluate(base, [m]).rows[0])
            row["source"] = "default"
        else:
            predicted = priced.step_time_s(job, m.gpu, m.num_gpus, scope=m.scope)
            row = {"model": m.model, "dataset": m.dataset, "gpu": m.gpu, "batch_size": m.batch_size,
                   "num_gpus": m.num_gpus, "amp": m.amp, "measured_s": m.step_time_s,
                   "predicted_s": predicted, "ape": abs(predicted - m.step_time_s) / m.step_time_s * 100.0,
                   "source": priced.step_time_source(job, m.gpu)}
        rows.append(row)
    if not rows:
        raise ValueError("no measurements to evaluate")
    apes = [r["ape"] for r in rows]
    fresh = [r["ape"] for r in rows if r["source"] == "calibrated"]
    return {"n": len(rows), "mape": float(np.mean(apes)), "p90_ape": float(np.percentile(apes, 90)),
            "calibrated_n": len(fresh), "calibrated_mape": float(np.mean(fresh)) if fresh else None,
            "calibration": bundle.label, "rows": rows}


def _key(spec: Any) -> tuple[str, str, int, bool]:
    from dltsched.predictors.zoo.graphs import resolve

    model, dataset = resolve(spec.model, spec.dataset)
    return model, dataset, int(spec.batch_size), bool(spec.amp)


class CalibratedGroupPredictor:
    """``GroupPredictor`` of :mod:`dltsched.predictors.colocation.metrics` with a bundle on top (module
    docstring); ``sharing``: the sharing mode of each (GPU, jobs) group evaluated (default ``timeslice``)."""

    def __init__(self, bundle: CalibrationBundle, base: Any,
                 sharing: dict[tuple[Any, ...], str] | None = None) -> None:
        self.bundle, self.base, self.sharing = bundle, base, dict(sharing or {})

    def predict(self, groups: Sequence[Any], data: Any) -> list[Any]:
        """Predictions for ``groups``: the bundle's group models where the GPU type and sharing mode
        are calibrated, the base predictor's for the rest."""
        from dltsched.predictors.colocation.metrics import GroupPrediction

        out = []
        for g in groups:
            cal = self.bundle.for_gpu(g.gpu)
            mode = self.sharing.get((g.gpu, g.jobs), "timeslice")
            if cal is None or cal.sharing_fit(mode) is None:
                out.append(self.base.predict([g], data)[0])
                continue
            given = {}
            for (gpu, spec), prof in data.isolated.items():
                if gpu == g.gpu and prof.step_time_s:
                    key = _key(spec)
                    given[key] = IsolatedRow(key[0], key[1], key[2], prof.step_time_s, "compute", key[3],
                                             None, prof.memory_mib, prof.gpu_util)
            got = replace(cal, profiles={**cal.profiles, **given}).group([_key(s) for s in g.jobs], mode)
            assert got is not None  # the mode was checked above
            out.append(GroupPrediction(tuple(got["speeds"]), got["memory_mib"], got["gpu_util"]))
        return out
