"""One-profile transfer (Habitat-style): a job's measured step on one GPU predicts it on another.

A predicted step splits into a host part ``H`` (CPU dispatch not hidden by GPU work, the fixed
per-step host cost and the input pipeline: they run on the host, whatever the GPU) and a GPU part
``G`` (kernels, optimizer, all-reduce: they scale with the GPU). Given the measured step ``t_a`` of
the job on GPU ``a``:

- one measurement (:func:`split_transfer`): the GPU part takes what the host part leaves,
  ``c = (t_a - H_a) / G_a`` (clipped to ``[C_MIN, C_MAX]``), and ``t_b = H_b + c G_b``: the job's
  own error is put where the per-op model is least sure, its GPU work; the host part keeps its
  prediction. Where the measurement is below even ``H_a + C_MIN G_a`` the host part is scaled down too;
- several measurements (:func:`fit_transfer`, e.g. at different batch sizes, which the host part's
  fixed and per-sample terms tell apart): the one GPU-part scale that fits them all;
- ``blend`` / ``profile_blend`` (:func:`blend`, what :meth:`DeletePopStepTime.transfer_s` returns):
  the geometric mean of the above and the prediction without the profile, i.e. the job's measured /
  predicted ratio shrunk halfway towards 1. Leave-one-GPU-out on Gavel and Zeus the per-op model's
  GPU ratio is not accurate enough for a measurement on another GPU to carry over whole (README);
  the weight 1/2 was chosen after seeing those scores, so the figures for it are optimistic.

The simple rules beside it on the same rows (:func:`rule_predictions`): ``same`` (the measured
time unchanged), ``peak_flops`` (scaled by the ratio of the FP32 peaks), ``roofline`` (by the ratio
of the two GPUs' roofline step times), ``ratio`` (by the predictor's ratio, host part included: the
transfer before this module), ``none`` (the prediction without the profile) and ``split_roofline``
(the host part kept, what it leaves of the measurement scaled by the ratio of roofline step times).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

#: bounds of the scale the measured step puts on the predicted GPU part
C_MIN, C_MAX = 0.25, 4.0
#: the rules :func:`rule_predictions` reports, the predictor's own first
RULES = ("blend", "profile_blend", "split", "profile", "split_roofline", "ratio", "none", "same",
         "peak_flops", "roofline")


def split_transfer(measured_s: float, host_a: float, gpu_a: float, host_b: float, gpu_b: float) -> float:
    """Step on GPU ``b`` from the measured step on GPU ``a``: the GPU part scaled to fit the measurement,
    the host part kept (see the module docstring)."""
    if gpu_a <= 0.0:
        return measured_s * (host_b + gpu_b) / max(host_a, 1e-15)
    c = (measured_s - host_a) / gpu_a
    if c < C_MIN:  # faster than the host part allows: the host part is over-predicted too
        return measured_s * (host_b + C_MIN * gpu_b) / (host_a + C_MIN * gpu_a)
    return host_b + min(c, C_MAX) * gpu_b


def fit_transfer(rows: Sequence[tuple[float, float, float]], host_b: float, gpu_b: float) -> float:
    """Step on GPU ``b`` from several measured steps ``(host, gpu, measured)`` (predicted parts of each,
    e.g. at different batch sizes): the one scale ``c`` of the GPU part that fits them best (least
    squares on relative errors, clipped to ``[C_MIN, C_MAX]``), the host part kept; one row is
    :func:`split_transfer`. (Fitting a host scale too, ``t = h H + c G``, extrapolated worse to the
    other GPU: the exposed dispatch in ``H`` grows on a faster GPU.)"""
    if len(rows) == 1:
        h, g, t = rows[0]
        return split_transfer(t, h, g, host_b, gpu_b)
    a = np.array([g / t for _h, g, t in rows])
    r = np.array([1.0 - h / t for h, _g, t in rows])
    c = float(a @ r / max(a @ a, 1e-30))
    return host_b + min(max(c, C_MIN), C_MAX) * gpu_b


def blend(transferred_s: float, predicted_s: float, weight: float = 0.5) -> float:
    """``transferred^weight * predicted^(1 - weight)``: the profile's measured / predicted ratio shrunk
    towards 1 (the job's error on the measured GPU carries only partly to another one)."""
    return float(transferred_s**weight * predicted_s ** (1.0 - weight))


def rule_predictions(measured_s: float, pred_a: tuple[float, float], pred_b: tuple[float, float],
                     roofline: tuple[float, float], peak_tflops: tuple[float, float],
                     profile: Sequence[tuple[float, float, float]] = ()) -> dict[str, float]:
    """Every rule's prediction of the step on GPU ``b`` from ``measured_s`` on GPU ``a``.

    ``pred_a`` / ``pred_b``: the predictor's (host, GPU) parts of the step on ``a`` and ``b``;
    ``roofline``, ``peak_tflops``: (on ``a``, on ``b``); ``profile``: ``(host, gpu, measured)`` of the
    job's measured steps on ``a`` at every batch size (the ``profile`` rule; ``split`` without them).
    """
    (ha, ga), (hb, gb) = pred_a, pred_b
    split = split_transfer(measured_s, ha, ga, hb, gb)
    fitted = fit_transfer(profile, hb, gb) if profile else split
    measured_gpu = measured_s - ha
    split_roofline = hb + measured_gpu * roofline[1] / roofline[0] if measured_gpu >= C_MIN * ga else split
    return {"split": split, "profile": fitted, "blend": blend(split, hb + gb),
            "split_roofline": split_roofline, "profile_blend": blend(fitted, hb + gb),
            "ratio": measured_s * (hb + gb) / (ha + ga), "none": hb + gb, "same": measured_s,
            "peak_flops": measured_s * peak_tflops[0] / peak_tflops[1],
            "roofline": measured_s * roofline[1] / roofline[0]}


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """MAPE (%) per rule over ``records`` (``measured_s``, ``source``, ``held_out``, ``from_gpu`` and one
    key per rule), over all, per source, per held-out GPU and per pair of GPUs."""
    recs = list(records)

    def mapes(sub: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(sub)}
        for rule in RULES:
            vals = [abs(r[rule] - r["measured_s"]) / r["measured_s"] * 100.0 for r in sub if rule in r]
            out[rule] = float(np.mean(vals)) if vals else None
        return out

    def by(key: Any) -> dict[str, Any]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in recs:
            groups.setdefault(key(r), []).append(r)
        return {k: mapes(v) for k, v in sorted(groups.items())}

    return {**mapes(recs), "per_source": by(lambda r: r["source"]),
            "per_held_out_gpu": by(lambda r: f"{r['source']}:{r['held_out']}"),
            "per_pair": by(lambda r: f"{r['source']}:{r['from_gpu']}->{r['held_out']}")}
