"""Coarsened operator graphs of job types (torch-free), the input of the E-GGAT network.

A model's operator graph comes from ``dltsched.predictors.zoo.load_graph`` when the zoo has it;
its ops are grouped per (layer bin, op class) into at most ``max_bins x classes`` super-nodes with
summed FLOPs and bytes, and super-node edges carry the summed tensor bytes. Models the zoo lacks
(or when the zoo is not installed) get a documented fallback: a chain of the catalog's ``layers``
blocks, each with an equal share of the catalog's per-sample FLOPs and activations, marked
``synthetic`` so callers can report it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from dltsched.engine.domain.catalog import model_spec

OP_CLASSES = ("conv", "matmul", "attention", "norm", "elementwise", "pool", "embedding", "rnn", "reduction",
              "other")
_FAMILY_CLASS = {"cnn": "conv", "transformer": "attention", "rnn": "rnn", "recsys": "embedding"}
_MIB = 1024.0 * 1024.0


@dataclass(frozen=True, slots=True)
class SuperNode:
    """Summed per-sample costs of the ops of one op class in one layer bin."""

    op_class: str
    position: float
    fwd_gflops: float
    bwd_gflops: float
    bytes_mib: float
    param_mib: float


@dataclass(frozen=True, slots=True)
class CoarseGraph:
    """A job type's coarsened operator graph; ``edges`` are (src, dst, tensor MiB per sample)."""

    model: str
    nodes: tuple[SuperNode, ...]
    edges: tuple[tuple[int, int, float], ...]
    synthetic: bool


def _class_of(op_class: str) -> str:
    return op_class if op_class in OP_CLASSES else "other"


def _from_zoo(model: str, dataset: str | None, max_bins: int) -> CoarseGraph | None:
    try:
        from dltsched.predictors.zoo import load_graph  # type: ignore[attr-defined]

        graph = load_graph(model, dataset)
    except (ImportError, AttributeError, ValueError, KeyError, FileNotFoundError):
        return None
    num_layers = max(1,
                     int(graph.graph.get("num_layers")
                         or 1 + max(int(a.get("layer", 0)) for _, a in graph.nodes(data=True))))
    bins: dict[tuple[int, str], list[float]] = {}
    where: dict[object, tuple[int, str]] = {}
    for op, a in graph.nodes(data=True):
        b = min(max_bins - 1, int(a.get("layer", 0)) * max_bins // num_layers)
        key = (b, _class_of(str(a.get("op_class", "other"))))
        acc = bins.setdefault(key, [0.0, 0.0, 0.0, 0.0])
        acc[0] += float(a.get("fwd_flops", 0.0)) / 1e9
        acc[1] += float(a.get("bwd_flops", 0.0)) / 1e9
        acc[2] += (float(a.get("bytes_read", 0.0)) + float(a.get("bytes_written", 0.0))) / _MIB
        acc[3] += float(a.get("param_bytes", 0.0)) / _MIB
        where[op] = key
    keys = sorted(bins)
    index = {k: i for i, k in enumerate(keys)}
    nodes = tuple(SuperNode(k[1], (k[0] + 0.5) / max_bins, *bins[k]) for k in keys)
    edge_mib: dict[tuple[int, int], float] = {}
    for u, v, a in graph.edges(data=True):
        s, d = index[where[u]], index[where[v]]
        if s != d:
            edge_mib[(s, d)] = edge_mib.get((s, d), 0.0) + float(a.get("tensor_bytes", 0.0)) / _MIB
    return CoarseGraph(model, nodes, tuple((s, d, w) for (s, d), w in sorted(edge_mib.items())), False)


def _synthetic(model: str, dataset: str | None) -> CoarseGraph:
    spec = model_spec(model)
    data = spec.dataset(dataset)
    n = max(1, spec.layers)
    op_class = _FAMILY_CLASS.get(spec.family, "matmul")
    node = SuperNode(op_class, 0.0, data.fwd_gflops / n, 2.0 * data.fwd_gflops / n,
                     2.0 * data.activation_mib / n, 4.0 * spec.params_m * 1e6 / _MIB / n)
    nodes = tuple(SuperNode(node.op_class, (i + 0.5) / n, node.fwd_gflops, node.bwd_gflops, node.bytes_mib,
                            node.param_mib) for i in range(n))
    edges = tuple((i, i + 1, data.activation_mib / n) for i in range(n - 1))
    return CoarseGraph(model, nodes, edges, True)


@cache
def coarse_graph(model: str, dataset: str | None = None, max_bins: int = 8) -> CoarseGraph:
    """The coarsened graph of a model (zoo graph when available, else the synthetic chain)."""
    return _from_zoo(model, dataset, max_bins) or _synthetic(model, dataset)


def node_features(node: SuperNode, batch_size: int, amp: bool) -> list[float]:
    """Op class one-hot, log FLOPs and bytes per step, layer position, log parameter MiB."""
    one_hot = [1.0 if node.op_class == c else 0.0 for c in OP_CLASSES]
    half = 0.5 if amp else 1.0
    return [*one_hot, math.log1p(node.fwd_gflops * batch_size), math.log1p(node.bwd_gflops * batch_size),
            math.log1p(node.bytes_mib * batch_size * half), node.position, math.log1p(node.param_mib)]


NODE_FEATURES = len(OP_CLASSES) + 5
