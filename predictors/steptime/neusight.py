"""NeuSight's end-to-end iteration labels and torch.fx operator traces, as kernels of :mod:`kernels`.

A label ``labels/<GPU>/<model>-<train|inf>-<seq len>-<batch>.json`` holds the measured latency of
one iteration (``e2e_latency`` = forward + backward, ms; no optimizer, no data loading: scope
``fwd_bwd``) and ``num_layer``; the trace beside it (``.csv``) lists the operators of the model
with one transformer layer (layer 0) in full. The iteration is the ops outside the layers plus
``num_layer`` times the ops of layer 0.

Each traced operator becomes the kernels it launches, forward and (training) backward:

- linear / addmm ``(M x K) @ (K x N)``: forward GEMM; backward ``dX = dY W^T`` (M x K, depth N)
  and ``dW = X^T dY`` (K x N, depth M), plus the bias gradient (a reduction over dY);
- matmul / bmm: forward batched GEMM; backward two batched GEMMs with their own shapes;
- softmax, layer norm: their kernel forward; backward one element-wise pass over 3 tensors
  (softmax) or a layer-norm pass plus one (layer norm);
- element-wise ops and dropout: one element-wise kernel forward, one backward (add: none); in
  inference dropout is the identity and launches nothing;
- dtype conversions (``to``, ``type``, ``float``, ...) launch a copy only where the input's dtype
  differs from the output's, ``contiguous`` only where its input is not contiguous (the traces
  measure these no-ops at the bare call cost, 0.01 ms, where a copy of an attention score tensor
  would take 1 ms);
- embeddings: a gather forward; backward the gradient's zeroing (weight-sized) and a scatter-add;
- views, shape queries and the like launch nothing.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dltsched.predictors.steptime.kernels import (
    Kernel,
    KernelGpu,
    KernelModel,
    KernelSample,
    gemm_kernel,
    roofline_s,
    vector_kernel,
)

#: label folder -> kernel-data GPU id (:data:`kernels.NEUSIGHT_GPUS`)
LABEL_GPUS = {"NVIDIA_A100-PCIE-40GB": "a100-pcie-40gb", "Tesla_P100-PCIE-16GB": "p100", "Tesla_P4": "p4",
              "Tesla_T4": "t4", "Tesla_V100-PCIE-32GB": "v100-pcie-32gb"}
#: label model name -> zoo model id
LABEL_MODELS = {"bert_large": "bert_large", "gpt2_large": "gpt2_large", "gpt3_xl": "gpt3_xl",
                "gpt3_27": "gpt3_2.7b", "opt_13": "opt_1.3b", "switchxl4": "switch_xl"}
_LAYER = re.compile(r"\.(layer|h|layers|block)\.0'")
_ANY_LAYER = re.compile(r"\.(layer|h|layers|block)\.\d+'")
_ELEMENTWISE_FUNCS = {"add": "add", "sub": "add", "mul": "mul", "truediv": "div", "pow": "pow",
                      "gelu": "gelu",
                      "tanh": "tanh", "where": "add", "relu": "relu", "dropout": "mul", "masked_fill": "mul",
                      "contiguous": "addu", "to": "addu", "type": "addu", "cumsum": "addu", "float": "addu"}
_FREE_BACKWARD = {"add", "sub", "contiguous", "to", "type", "where", "cumsum", "float", "masked_fill"}
#: conversions that launch a copy only when the dtype changes
_CONVERSIONS = {"to", "type", "float", "type_as", "long", "bool", "half"}


@dataclass(frozen=True, slots=True)
class Label:
    """One measured configuration of the NeuSight data: GPU, model, training or inference, sequence
    length, batch and layer count, its end-to-end seconds, the kernels of layer 0 and outside the layers,
    and the traced per-op seconds of both."""

    gpu: str
    model: str
    train: bool
    seq_len: int
    batch: int
    num_layer: int
    e2e_s: float
    layer: tuple[Kernel, ...]  # kernels of layer 0
    other: tuple[Kernel, ...]  # kernels outside the layers
    traced_s: tuple[float, float]  # measured per-op sum of (layer 0, outside), fw + bw


def _shapes(text: str) -> list[list[int]]:
    try:
        out = ast.literal_eval(text) if text else []
    except (ValueError, SyntaxError):
        return []
    return [list(s) for s in out if isinstance(s, (list, tuple))]


def _numel(shape: Sequence[int]) -> float:
    return float(math.prod(shape)) if shape else 1.0


def _module_class(meta: str) -> str:
    found = re.findall(r"<class '([^']+)'>", meta)
    return found[-1].rsplit(".", 1)[-1].lower() if found else ""


def _function(row: dict[str, str]) -> str:
    target = row["target"]
    m = re.search(r"(?:function|method) (\w+)", target)
    return m.group(1) if m else target.split(".")[-1]


def _first_input(row: dict[str, str]) -> str:
    m = re.match(r"\{\s*(\w+)\s*:", row.get("_input_nodes", ""))
    return m.group(1) if m else ""


def op_kernels(row: dict[str, str], train: bool, dtypes: dict[str, str] | None = None) -> list[Kernel]:
    """Kernels (forward, then backward if ``train``) of one traced operator; ``dtypes``: the output
    dtype of the trace's earlier nodes by name (a conversion of an input already in the output's
    dtype launches nothing; without ``dtypes`` every conversion is counted as a copy)."""
    op, ins = row["op"], _shapes(row["input_shapes"])
    out_shape = _shapes(f"[{row['output_shape']}]") if row["output_shape"].startswith("(") else []
    out = out_shape[0] if out_shape else (ins[0] if ins else [])
    if op == "call_module":
        kind = _module_class(row["meta"])
        name = row["Name"].lower()
        if "embedding" in kind:
            n = _numel(out)
            k = [vector_kernel("elementwise", "addu", n / out[-1], out[-1])]
            return k + ([vector_kernel("elementwise", "addu", n / out[-1], out[-1]),
                         vector_kernel("elementwise", "add", n / out[-1], out[-1])] if train else [])
        if "layernorm" in kind:
            rows = _numel(out) / out[-1]
            return [vector_kernel("layernorm", "ln", rows, out[-1])] + (
                [vector_kernel("layernorm", "ln", rows, out[-1]),
                 vector_kernel("elementwise", "mul", rows, out[-1])]
                if train else [])
        if "dropout" in kind:
            if not train:
                return []
            rows = _numel(out) / out[-1]
            return [vector_kernel("elementwise", "mul", rows, out[-1])] + (
                [vector_kernel("elementwise", "mul", rows, out[-1])] if train else [])
        if "linear" in kind or "conv1d" in kind:
            return _linear(_numel(ins[0]) / ins[0][-1], ins[0][-1], out[-1], train)
        if any(a in kind for a in ("tanh", "gelu", "relu", "activation")) or "activation" in name:
            rows = _numel(out) / out[-1]
            act = "tanh" if "tanh" in kind else "gelu" if "gelu" in kind else "relu"
            return [vector_kernel("elementwise", act, rows, out[-1])] + (
                [vector_kernel("elementwise", "mul", rows, out[-1])] if train else [])
        return []
    if op not in ("call_function", "call_method"):
        return []
    fn = _function(row)
    if fn == "addmm" and len(ins) == 3:
        return _linear(ins[1][0], ins[1][1], ins[2][1], train)
    if fn in ("matmul", "bmm", "baddbmm") and len(ins) >= 2:
        a, b = ins[-2], ins[-1]
        if len(a) < 2 or len(b) < 2:
            return []
        batch = _numel(a[:-2])
        m, k, n = a[-2], a[-1], b[-1]
        fw = [gemm_kernel("bmm", batch, m, n, k)]
        return fw + ([gemm_kernel("bmm", batch, m, k, n),
                      gemm_kernel("bmm", batch, k, n, m)] if train else [])
    if fn == "softmax" and out:
        rows = _numel(out) / out[-1]
        return [vector_kernel("softmax", "softmax", rows, out[-1])] + (
            [vector_kernel("elementwise", "mul", rows, out[-1])] if train else [])
    if fn in ("embedding",) and out:
        rows = _numel(out) / out[-1]
        return [vector_kernel("elementwise", "addu", rows, out[-1])] + (
            [vector_kernel("elementwise", "add", rows, out[-1])] if train else [])
    if fn == "dropout" and not train:
        return []
    if fn in _CONVERSIONS and dtypes is not None and dtypes.get(_first_input(row)) == row.get("dtype"):
        return []
    if fn == "contiguous" and row.get("input_contiguous", "").startswith("[True"):
        return []
    if fn in _ELEMENTWISE_FUNCS and out and _numel(out) > 1:
        kind = _ELEMENTWISE_FUNCS[fn]
        full = [s for s in ins if _numel(s) == _numel(out)]  # broadcast operands (masks, biases) are cached
        if kind in ("add", "mul", "div", "pow") and len(full) < 2:
            kind += "u"
        rows = _numel(out) / out[-1]
        fw = [vector_kernel("elementwise", kind, rows, out[-1])]
        return fw + ([vector_kernel("elementwise", "mul", rows, out[-1])]
                     if train and fn not in _FREE_BACKWARD else [])
    return []


def _linear(m: float, k: float, n: float, train: bool) -> list[Kernel]:
    fw = [gemm_kernel("linear", 1, m, n, k)]
    if not train:
        return fw
    return fw + [gemm_kernel("linear", 1, m, k, n), gemm_kernel("linear", 1, k, n, m),
                 vector_kernel("elementwise", "addu", m, n)]


def read_labels(data_dir: str | os.PathLike[str] | None = None, *, train: bool | None = None) -> list[Label]:
    """Every label with a trace (``-fusion`` variants and labels without a trace are skipped)."""
    from dltsched.instances.datadir import data_file

    csv.field_size_limit(1 << 30)
    out = []
    base = data_file("neusight", "labels", data_dir=data_dir)
    for folder, gpu in sorted(LABEL_GPUS.items()):
        for path in sorted((base / folder).glob("*.json")):
            m = re.fullmatch(r"(.+)-(train|inf)-(\d+)-(\d+)", path.stem)
            trace = path.with_suffix(".csv")
            if m is None or not trace.exists():
                continue
            is_train = m.group(2) == "train"
            if train is not None and is_train != train:
                continue
            raw = json.loads(path.read_text())
            layer, other, traced = [], [], [0.0, 0.0]
            dtypes: dict[str, str] = {}
            with trace.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    dtypes[row["Name"]] = row.get("dtype", "")
                    in_layer = bool(_LAYER.search(row["meta"]))
                    if not in_layer and _ANY_LAYER.search(row["meta"]):
                        continue  # another layer traced in full: counted through num_layer
                    ks = op_kernels(row, is_train, dtypes)
                    (layer if in_layer else other).extend(ks)
                    fw_bw = (float(row["fw_latency"] or 0)
                             + (float(row["bw_latency"] or 0) if is_train else 0.0))
                    traced[0 if in_layer else 1] += fw_bw * 1e-3
            out.append(Label(gpu, LABEL_MODELS.get(m.group(1), m.group(1)), is_train, int(m.group(3)),
                             int(m.group(4)),
                             int(raw["num_layer"]), float(raw["e2e_latency"]) * 1e-3, tuple(layer),
                             tuple(other), (traced[0], traced[1])))
    return out


#: per-call cost of the traces' per-op timings: ops that launch nothing (size, getitem, view) measure
# 0.010-0.011 ms
TRACE_FLOOR_S = 1.0e-5
#: traced ops shorter than this are left out of :func:`trace_kernel_samples` (mostly the per-call cost)
TRACE_MIN_S = 5.0e-5


def trace_kernel_samples(data_dir: str | os.PathLike[str] | None = None,
                         skip_models: Sequence[str] = ()) -> list[KernelSample]:
    """Kernels measured inside whole models: every traced operator that launches one kernel forward,
    with its measured forward latency (the mean over traces where a GPU ran the same shape), as
    :class:`kernels.KernelSample` with the traces' own per-call floor. They teach the kernel model the
    aligned shapes of real models, which NeuSight's random-shape microbenchmarks lack. Traces of the
    zoo models in ``skip_models`` are left out."""
    from dltsched.instances.datadir import data_file

    csv.field_size_limit(1 << 30)
    found: dict[tuple[str, Kernel], list[float]] = {}
    base = data_file("neusight", "labels", data_dir=data_dir)
    for folder, gpu in sorted(LABEL_GPUS.items()):
        for trace in sorted((base / folder).glob("*.csv")):
            stem = trace.stem.split("-")[0]
            if LABEL_MODELS.get(stem, stem) in skip_models:
                continue
            dtypes: dict[str, str] = {}
            with trace.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    dtypes[row["Name"]] = row.get("dtype", "")
                    latency = float(row["fw_latency"] or 0) * 1e-3
                    if latency < TRACE_MIN_S:
                        continue
                    ks = op_kernels(row, False, dtypes)
                    if len(ks) == 1:
                        found.setdefault((gpu, ks[0]), []).append(latency)
    return [KernelSample(gpu, k, float(np.mean(v)), TRACE_FLOOR_S) for (gpu, k), v in found.items()]


def predict_label(label: Label, model: KernelModel, gpu: KernelGpu, floor: bool = True) -> float:
    """Predicted iteration seconds: kernels outside the layers plus ``num_layer`` times layer 0
    (``floor=False``: kernel bodies without the kernel data's per-call floor)."""
    layer = float(model.predict_s(list(label.layer), gpu, floor=floor).sum()) if label.layer else 0.0
    other = float(model.predict_s(list(label.other), gpu, floor=floor).sum()) if label.other else 0.0
    return other + label.num_layer * layer


def roofline_label(label: Label, gpu: KernelGpu) -> float:
    """Roofline seconds of ``label`` on ``gpu``: the kernels outside the layers plus ``num_layer`` times
    those of layer 0, each at the slower of its compute and memory bounds."""
    def total(ks: Sequence[Kernel]) -> float:
        return sum(max(roofline_s(k, gpu)) for k in ks)

    return total(label.other) + label.num_layer * total(label.layer)


def evaluate_labels(labels: Sequence[Label], models: dict[str, KernelModel],
                    gpus: dict[str, KernelGpu]) -> dict[str, Any]:
    """MAPE of the kernel model (``models[gpu]``: fitted without that GPU; ``body``: without the per-call
    floor, as in whole steps), of the plain roofline and of the sum of the trace's own measured per-op
    latencies (an upper reference: measured ops, no model)."""
    rows = []
    for lb in labels:
        pred = predict_label(lb, models[lb.gpu], gpus[lb.gpu])
        body = predict_label(lb, models[lb.gpu], gpus[lb.gpu], floor=False)
        roof = roofline_label(lb, gpus[lb.gpu])
        traced = lb.traced_s[1] + lb.num_layer * lb.traced_s[0]
        rows.append({"gpu": lb.gpu, "model": lb.model, "train": lb.train, "seq_len": lb.seq_len,
                     "batch": lb.batch,
                     "measured_s": lb.e2e_s, "predicted_s": pred, "body_s": body, "roofline_s": roof,
                     "traced_sum_s": traced, "ape": abs(pred - lb.e2e_s) / lb.e2e_s * 100.0,
                     "body_ape": abs(body - lb.e2e_s) / lb.e2e_s * 100.0,
                     "roofline_ape": abs(roof - lb.e2e_s) / lb.e2e_s * 100.0,
                     "traced_ape": abs(traced - lb.e2e_s) / lb.e2e_s * 100.0})

    def summary(sub: list[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(sub), "mape": float(np.mean([r["ape"] for r in sub])),
                "body_mape": float(np.mean([r["body_ape"] for r in sub])),
                "roofline_mape": float(np.mean([r["roofline_ape"] for r in sub])),
                "traced_sum_mape": float(np.mean([r["traced_ape"] for r in sub]))}

    out: dict[str, Any] = {"all": summary(rows)}
    for name, sub in (("train", [r for r in rows if r["train"]]),
                      ("inference", [r for r in rows if not r["train"]])):
        if sub:
            out[name] = summary(sub)
    out["per_gpu"] = {g: summary([r for r in rows if r["gpu"] == g])
                      for g in sorted({r["gpu"] for r in rows})}
    out["rows"] = rows
    return out


def write_labels_csv(labels: Sequence[Label], path: str | os.PathLike[str]) -> int:
    """The labels in ``eval-steptime`` CSV form (scope ``fwd_bwd``; inference labels are left out)."""
    rows = [lb for lb in labels if lb.train]
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "gpu", "batch_size", "num_gpus", "step_time_s", "seq_len", "scope", "source"])
        for lb in rows:
            w.writerow([lb.model, lb.gpu, lb.batch, 1, f"{lb.e2e_s:.6g}", lb.seq_len, "fwd_bwd", "neusight"])
    return len(rows)
