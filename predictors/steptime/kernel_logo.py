"""Leave-one-GPU-out evaluation of the kernel step model beside simple rules, on the same rows.

For each GPU (GPUs that share a fit, such as V100 and V100-32GB, are held out together) every row
of it leaves the step-model fit, and the kernel model used for its rows is the one fitted without
that GPU's kernels (where NeuSight measured it; other GPUs were never in the kernel data). The
held-out GPU enters only through its spec sheet. Beside it, on the same rows:

- ``roofline``: the sum of the graph's kernels at the spec peak / bandwidth, nothing else;
- ``constant``: the median measured step of the other GPUs' rows of the same setup;
- ``per_model_mean``: the mean measured step of the same workload and batch size on the other GPUs
  (of the workload at any batch size, scaled by batch, where that batch was not measured elsewhere).

``oracle_mape``: the model's MAPE once each held-out GPU's predictions are multiplied by the one scale
that fits that GPU's measured rows best (chosen with the held-out labels: a floor, not a prediction).

One-profile transfer (Habitat-style): each held-out row predicted from the same workload's measured
step at the same batch size on one other GPU (every such GPU in turn) by every rule of
:mod:`transfer` (the GPU part scaled to fit the measurement with the host part kept, the fit over
all the batch sizes measured there, the ratio of the fold's predictions, the measured time unchanged,
the ratio of peak FLOPS and of roofline step times, and the prediction without the profile).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dltsched.predictors.steptime import kernelstep
from dltsched.predictors.steptime.kernels import (
    KernelModel,
    gpu_family,
    load_kernel_model,
)
from dltsched.predictors.steptime.measurements import Measurement
from dltsched.predictors.steptime.model import gpu_spec_checked, learned_root
from dltsched.predictors.zoo.graphs import resolve


def kernel_family(gpu_id: str) -> str:
    """The key of a GPU in :func:`held_out_kernel_models`: GPUs sharing a fit (V100 and its PCIe 32 GB
    variant, A100 variants) are one family."""
    return gpu_family(learned_root(gpu_spec_checked(gpu_id).id))


def workload_key(m: Measurement, model_id: str, dataset: str) -> str:
    """The key of measurement ``m``'s workload (its setup, model ``model_id``, ``dataset`` and AMP)
    in the kernel step model's fitted terms."""
    return kernelstep.workload_key(m.source, model_id, dataset, m.amp)


def _row(m: Measurement, km: KernelModel) -> tuple[dict[str, float], str, str, int, str, float, str]:
    from dltsched.predictors.steptime.calibrate import job_of

    job = job_of(m)
    model_id, dataset = resolve(job.model, job.dataset)
    work = kernelstep.kernel_work(job, model_id, dataset, gpu_spec_checked(m.gpu), 0, m.scope, km)
    return (work, m.source, workload_key(m, model_id, dataset), m.batch_size, m.scope, m.step_time_s,
            learned_root(gpu_spec_checked(m.gpu).id))


#: the kernel model without ensembles: every kernel at its roofline time
ROOFLINE = KernelModel({})


def leave_one_gpu_out(rows: Sequence[Measurement], kernel_models: dict[str, KernelModel] | None = None,
                      train_extra: Sequence[Measurement] = (),
                      progress: Callable[[str], None] | None = None,
                      new_jobs: bool = False) -> dict[str, Any]:
    """Per held-out GPU and over all rows: MAPE of the kernel step model and of the simple rules.

    ``kernel_models``: GPU family (:func:`kernel_family`) -> kernel model fitted without it;
    families not in it use the shipped model. ``train_extra`` rows join every fit, never the test.
    ``transfer``: every rule of :mod:`transfer` on the same pairs (the fold's fit, which has the job's
    rows on the other GPUs); ``new_jobs``: also ``transfer_new_jobs``, with the job's model out of the
    step-model fit too (one fit per held-out GPU and model).
    """
    from dltsched.predictors.steptime.calibrate import (
        canonical_model,
        profile_key,
        roofline_s,
        transfer_workload,
    )
    from dltsched.predictors.steptime.transfer import rule_predictions, summarize

    kernel_models = kernel_models or {}
    shipped = load_kernel_model()
    everything = [*rows, *train_extra]
    memo: dict[tuple[int, Measurement], tuple[dict[str, float], str, str, int, str, float, str]] = {}

    def row(m: Measurement, km: KernelModel) -> tuple[dict[str, float], str, str, int, str, float, str]:
        key = (id(km), m)
        if key not in memo:
            memo[key] = _row(m, km)
        return memo[key]

    def root(m: Measurement) -> str:
        return learned_root(gpu_spec_checked(m.gpu).id)

    def parts(params: dict[str, Any], m: Measurement,
              km: KernelModel, source: str, wkey: str) -> tuple[float, float]:
        r = row(m, km)
        terms = kernelstep.predict_terms(params, r[0], source, wkey, r[3], r[4], r[6])
        return terms["dispatch"] + terms["fixed"] + terms["input"], terms["gpu"]

    def transfers(params: dict[str, Any], km: KernelModel, m: Measurement, train: list[Measurement],
                  held: str) -> list[dict[str, Any]]:
        _w, source, wkey, _b, _s, y, _g = row(m, km)
        out = []
        for t in train:
            if transfer_workload(t) != transfer_workload(m):
                continue
            profile = [(*parts(params, o, km, source, wkey), o.step_time_s) for o in train
                       if profile_key(o) == profile_key(t)]
            rules = rule_predictions(t.step_time_s, parts(params, t, km, source, wkey),
                                     parts(params, m, km, source, wkey), (roofline_s(t), roofline_s(m)),
                                     (gpu_spec_checked(t.gpu).fp32_tflops,
                                      gpu_spec_checked(m.gpu).fp32_tflops),
                                     profile)
            out.append({"source": m.source, "held_out": held, "from_gpu": root(t), "model": m.model,
                        "batch_size": m.batch_size, "measured_s": y, "profile_s": t.step_time_s, **rules})
        return out

    out_rows: list[dict[str, Any]] = []
    params_by_gpu = {}
    records: list[dict[str, Any]] = []
    new_records: list[dict[str, Any]] = []
    for held in sorted({root(m) for m in rows}):
        if progress:
            progress(held)
        km = kernel_models.get(kernel_family(held), shipped)
        train = [m for m in everything if root(m) != held]
        test = [m for m in rows if root(m) == held]
        params = kernelstep.fit([row(m, km) for m in train])
        params_by_gpu[held] = {k: v for k, v in params.items() if k != "input"}
        for m in test:
            work, source, wkey, batch, scope, y, gkey = row(m, km)
            terms = kernelstep.predict_terms(params, work, source, wkey, batch, scope, gkey)
            pred = sum(terms.values())
            same = [t for t in train if (t.source, t.model, t.dataset, t.num_gpus, t.amp)
                    == (m.source, m.model, m.dataset, m.num_gpus, m.amp)]
            at_batch = [t.step_time_s for t in same if t.batch_size == m.batch_size]
            if at_batch:
                mean = float(np.mean(at_batch))
            elif same:
                mean = float(np.mean([t.step_time_s * m.batch_size / t.batch_size for t in same]))
            else:
                mean = float("nan")
            records.extend(transfers(params, km, m, train, held))
            setup = [t.step_time_s for t in train if t.source == m.source] or [t.step_time_s for t in train]
            out_rows.append({"gpu": m.gpu, "held_out": held, "model": m.model, "dataset": m.dataset,
                             "batch_size": m.batch_size, "scope": m.scope, "source": m.source,
                             "measured_s": y, "predicted_s": pred, **{f"{k}_s": v for k, v in terms.items()},
                             "roofline_s": roofline_s(m), "constant_s": float(np.median(setup)),
                             "per_model_mean_s": mean})
        if new_jobs:
            for model in sorted({canonical_model(m.model) for m in test}):
                new = kernelstep.fit([row(t, km) for t in train if canonical_model(t.model) != model])
                for m in test:
                    if canonical_model(m.model) == model:
                        new_records.extend(transfers(new, km, m, train, held))

    def mape(col: str, sub: list[dict[str, Any]]) -> float | None:
        vals = [abs(r[col] - r["measured_s"]) / r["measured_s"] * 100.0 for r in sub if np.isfinite(r[col])]
        return float(np.mean(vals)) if vals else None

    def oracle(sub: list[dict[str, Any]]) -> float | None:
        """MAPE once each held-out GPU's predictions get the one scale that fits its measured rows best."""
        from dltsched.predictors.steptime.calibrate import oracle_scale

        apes = []
        for g in {r["held_out"] for r in sub}:
            mine = [r for r in sub if r["held_out"] == g]
            k = oracle_scale([r["measured_s"] for r in mine], [r["predicted_s"] for r in mine])
            apes += [abs(k * r["predicted_s"] - r["measured_s"]) / r["measured_s"] * 100.0 for r in mine]
        return float(np.mean(apes)) if apes else None

    def summary(sub: list[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(sub), "mape": mape("predicted_s", sub), "oracle_mape": oracle(sub),
                "roofline_mape": mape("roofline_s", sub),
                "constant_mape": mape("constant_s", sub),
                "per_model_mean_mape": mape("per_model_mean_s", sub),
                "per_model_mean_n": int(sum(np.isfinite(r["per_model_mean_s"]) for r in sub))}

    per_source = {s: summary([r for r in out_rows if r["source"] == s])
                  for s in sorted({r["source"] for r in out_rows})}
    per_gpu = {g: summary([r for r in out_rows if r["held_out"] == g])
               for g in sorted({r["held_out"] for r in out_rows})}
    out = {"all": summary(out_rows), "transfer": summarize(records), "per_source": per_source,
           "per_gpu": per_gpu, "params": params_by_gpu, "rows": out_rows}
    if new_jobs:
        out["transfer_new_jobs"] = summarize(new_records)
    return out


def fit_kernel_step(rows: Sequence[Measurement], kernel_model: KernelModel | None = None) -> dict[str, Any]:
    """The ``kernel_step`` block of the factors, fitted on ``rows`` (any GPUs, scopes and setups)."""
    km = kernel_model or load_kernel_model()
    params = kernelstep.fit([_row(m, km) for m in rows])
    params["fitted_on"] = sorted({f"{m.source}:{learned_root(gpu_spec_checked(m.gpu).id)}" for m in rows})
    return params


def held_out_kernel_models(data_dir: str | None = None) -> dict[str, KernelModel]:
    """Per GPU family of NeuSight's kernel data, the kernel model fitted without it."""
    from dltsched.predictors.steptime import kernels as kn
    from dltsched.predictors.steptime import neusight as ns

    gpus = {g.id: g for g in kn.neusight_gpus(data_dir).values()}
    samples = kn.neusight_kernels(data_dir)
    traced = ns.trace_kernel_samples(data_dir)
    return {family: kn.fit([s for s in samples if kernel_family(s.gpu) != family], gpus,
                           extra=[s for s in traced if kernel_family(s.gpu) != family])
            for family in sorted({kernel_family(s.gpu) for s in samples})}
