"""Shipped operator graphs: compact versioned JSON, one file per model (``graph_<model>.json``).

Reading needs no torch. File layout (``format_version`` 1)::

    {"format_version": 1, "model": "resnet18", "columns": [...node columns...],
     "datasets": {"cifar10": {"num_layers": 10, "param_bytes_total": 44695848,
                              "nodes": [[op, op_class, layer, fwd_flops, ...], ...],
                              "edges": [[src, dst, tensor_bytes], ...]}}}

Node ids are row indices in topological order. All costs are per sample (batch size 1) except
``param_bytes``; ``bytes_read`` counts activation inputs only (weights are ``param_bytes``).
Numbers are rounded to 4 significant digits.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx

from dltsched.engine.domain.errors import ValidationError

FORMAT_VERSION = 1
COLUMNS = ("op", "op_class", "layer", "fwd_flops", "bwd_flops", "bytes_read", "bytes_written",
           "activation_bytes", "param_bytes")
_PACKAGE = "dltsched.predictors.zoo"


def graph_path(model: str) -> Path:
    """Where the shipped graph file of ``model`` lives (inside the package)."""
    return Path(str(resources.files(_PACKAGE).joinpath(f"graph_{model}.json")))


def _round(x: float) -> float | int:
    if x == 0:
        return 0
    r = float(f"{x:.4g}")
    return int(r) if r.is_integer() else r


def graph_to_dict(g: nx.DiGraph) -> dict[str, Any]:
    """The per-dataset JSON record of a graph (node ids become row indices)."""
    order = list(nx.topological_sort(g))
    index = {n: i for i, n in enumerate(order)}
    nodes = [[g.nodes[n][c] if c in ("op", "op_class", "layer") else _round(g.nodes[n][c]) for c in COLUMNS]
             for n in order]
    edges = sorted([index[u], index[v], _round(d["tensor_bytes"])] for u, v, d in g.edges(data=True))
    return {"num_layers": g.graph["num_layers"], "param_bytes_total": _round(g.graph["param_bytes_total"]),
            "nodes": nodes, "edges": edges}


def write_graph_file(model: str, graphs: dict[str, nx.DiGraph], path: Path | None = None) -> Path:
    """Write ``graphs`` (dataset -> graph) of ``model`` as its shipped JSON file."""
    path = path or graph_path(model)
    payload = {"format_version": FORMAT_VERSION, "model": model, "columns": list(COLUMNS),
               "datasets": {d: graph_to_dict(g) for d, g in graphs.items()}}
    path.write_text(json.dumps(payload, separators=(",", ":")) + "\n")
    return path


@cache
def _read_file(model: str) -> dict[str, Any]:
    path = graph_path(model)
    if not path.is_file():
        raise ValidationError("model", f"'{model}' has no shipped operator graph; run "
                                       "'dltsched predict build-graphs' (needs torch)")
    raw = json.loads(path.read_text())
    if raw.get("format_version") != FORMAT_VERSION:
        raise ValidationError("model",
                              f"graph file of '{model}' has format_version {raw.get('format_version')}; "
                                       f"expected {FORMAT_VERSION}: rebuild with 'dltsched "
                                       "predict build-graphs'")
    return raw


def resolve(model: str, dataset: str | None = None) -> tuple[str, str]:
    """Canonical (model id, dataset) from a name or alias; raises ValidationError naming the field."""
    from dltsched.engine.domain.catalog import model_catalog

    try:
        spec = model_catalog().get(model)
    except ValueError as err:
        raise ValidationError("model", str(err)) from None
    ds = spec.default_dataset if dataset is None else dataset.lower()
    if ds not in spec.datasets:
        raise ValidationError("dataset", f"'{dataset}' not known for model '{spec.id}'; one of "
                                         f"{', '.join(sorted(spec.datasets))}")
    return spec.id, ds


def graph_record(model: str, dataset: str | None = None) -> dict[str, Any]:
    """The raw JSON record (``nodes``/``edges`` rows) of a shipped graph: fastest access."""
    mid, ds = resolve(model, dataset)
    return _read_file(mid)["datasets"][ds]


def load_graph(model: str, dataset: str | None = None) -> nx.DiGraph:
    """The shipped operator graph of ``model`` on ``dataset`` (default: the catalog's default)."""
    mid, ds = resolve(model, dataset)
    rec = graph_record(mid, ds)
    g = nx.DiGraph(model=mid, dataset=ds, num_layers=rec["num_layers"], format_version=FORMAT_VERSION,
                   param_bytes_total=rec["param_bytes_total"])
    for i, row in enumerate(rec["nodes"]):
        g.add_node(i, **dict(zip(COLUMNS, row, strict=True)))
    for u, v, b in rec["edges"]:
        g.add_edge(u, v, tensor_bytes=b)
    return g


def zoo_models() -> tuple[str, ...]:
    """Canonical ids of every model with a shipped graph file, in catalog order."""
    from dltsched.engine.domain.catalog import model_catalog

    return tuple(m for m in model_catalog().ids() if graph_path(m).is_file())
