"""Operator-graph extraction with ``torch.export`` on the meta device (CPU only, no real memory).

The model's training forward pass (model + loss) is exported at two batch sizes; per-sample costs
are the per-sample slopes between them, so values are exact for batch-proportional ops whatever the
batch dimension's position (sequence-first RNNs included). Pure view ops are collapsed. Backward
costs follow :mod:`opcost`. Needs torch; the shipped JSON graphs (:mod:`graphs`) do not.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch

from dltsched.predictors.zoo import nets_cnn, nets_gen_rl, nets_hf, nets_seq, opcost
from dltsched.predictors.zoo.graphs import write_graph_file
from dltsched.predictors.zoo.nets_base import BUILDERS, Built

#: modules whose import registers the builders
NET_MODULES = (nets_cnn, nets_gen_rl, nets_hf, nets_seq)

_BATCHES = (2, 4)


@dataclass(slots=True)
class _Op:
    """One surviving (non-view) op of an exported graph, costs at one batch size."""

    op: str
    module_path: str
    inputs: list[int]  # indices of producer ops (activation inputs)
    fwd_flops: float
    bytes_read: float
    bytes_written: float
    param_bytes: float
    saves_inputs: bool
    saves_output: bool
    out_bytes: float
    in_bytes: list[float] = field(default_factory=list)
    params: tuple[str, ...] = ()


def _op_name(target: Any) -> str:
    name = getattr(target, "__name__", str(target))
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        name = packet.__name__
    return name.split(".")[0]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _nbytes(t: torch.Tensor) -> float:
    return float(t.numel() * t.element_size())


def _flat_args(args: Any) -> list[Any]:
    if isinstance(args, list | tuple):
        return [a for v in args for a in _flat_args(v)]
    return [args]


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    paths = [p for p, _t in stack.values()]
    return paths[-1] if paths else ""


def _ops_of(ep: torch.export.ExportedProgram) -> list[_Op]:
    """The exported graph as a list of non-view ops in topological order."""
    params = {s.arg.name: s.target for s in ep.graph_signature.input_specs
              if s.kind == torch.export.graph_signature.InputKind.PARAMETER}
    source: dict[str, list[int]] = {}  # fx node name -> producing op indices (through views)
    ops: list[_Op] = []
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        name = _op_name(node.target)
        args = [a for a in _flat_args((node.args, tuple(node.kwargs.values())))
                if isinstance(a, torch.fx.Node)]
        producers = sorted({i for a in args for i in source.get(a.name, [])})
        if name in opcost.VIEW_OPS or name.startswith("_assert") or name.startswith("sym_"):
            source[node.name] = producers
            if args and args[0].name in params:  # a view of a weight is still a weight
                params[node.name] = params[args[0].name]
            continue
        outs = _tensors(node.meta.get("val"))
        act_in = [a for a in args if a.name not in params and isinstance(a.meta.get("val"), torch.Tensor)]
        weights = [a for a in args if a.name in params]
        in_shapes = [tuple(a.meta["val"].shape) for a in act_in]
        w_shapes = [tuple(a.meta["val"].shape) for a in weights]
        out_bytes = sum(_nbytes(t) for t in outs)
        fwd = opcost.forward_flops(name, in_shapes, [tuple(t.shape) for t in outs], w_shapes)
        if opcost.op_class(name) == "embedding":
            fwd = float(sum(t.numel() for t in outs))
            read = out_bytes
        else:
            read = sum(_nbytes(a.meta["val"]) for a in act_in)
        ops.append(_Op(name, _module_path(node), producers, fwd, read, out_bytes,
                       sum(_nbytes(a.meta["val"]) for a in weights), opcost.saves_inputs(name),
                       opcost.saves_output(name), out_bytes,
                       params=tuple(params[a.name] for a in weights)))
        source[node.name] = [len(ops) - 1]
    return ops


def export_ops(built: Built, batch: int) -> list[_Op]:
    """Export the training forward of ``built`` at ``batch`` on the meta device."""
    with torch.device("meta"):
        inputs = built.make_inputs(batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(built.module.train(), inputs, strict=False)
    return _ops_of(ep)


def _saved_bytes(ops: list[_Op]) -> list[float]:
    """Bytes of each op's output kept for backward (each tensor counted once)."""
    saved = [False] * len(ops)
    for i, op in enumerate(ops):
        if op.saves_output:
            saved[i] = True
        if op.saves_inputs:
            for p in op.inputs:
                saved[p] = True
    # recurrent ops also keep their gate activations (about twice their output)
    return [op.out_bytes * (s + 2.0 * (opcost.op_class(op.op) == "rnn"))
            for op, s in zip(ops, saved, strict=True)]


def _layer_of(path: str, blocks: tuple[str, ...]) -> int | None:
    best, best_len = None, -1
    for i, prefix in enumerate(blocks):
        if (path == prefix or path.startswith(prefix + ".")) and len(prefix) > best_len:
            best, best_len = i, len(prefix)
    return best


def _layers(ops: list[_Op], blocks: tuple[str, ...]) -> list[int]:
    out: list[int] = []
    for op in ops:
        layer = _layer_of(op.module_path, blocks)
        if layer is None:
            layer = max((out[p] for p in op.inputs), default=0)
        out.append(layer)
    return out


def _slope(a: float, b: float) -> float:
    return max(0.0, (b - a) / (_BATCHES[1] - _BATCHES[0]))


def extract_graph(model: str, dataset: str | None = None) -> nx.DiGraph:
    """Operator graph of zoo ``model`` on ``dataset`` (costs per sample; see graphs.load_graph)."""
    from dltsched.engine.domain.catalog import model_catalog

    spec = model_catalog().get(model)
    dataset = dataset or spec.default_dataset
    builder, _known = BUILDERS[spec.id]
    with torch.device("meta"):
        built = builder(dataset)
    modules = dict(built.module.named_modules())
    missing = [b for b in built.blocks if b not in modules]
    if missing:
        raise RuntimeError(f"{spec.id}/{dataset}: block prefixes {missing} name no submodule; "
                           "fix the builder")
    small, large = (export_ops(built, b) for b in _BATCHES)
    if len(small) != len(large) or any(a.op != b.op for a, b in zip(small, large, strict=True)):
        raise RuntimeError(f"{spec.id}/{dataset}: graph differs between batch sizes; cannot derive "
                           "per-sample costs")
    saved_small, saved_large = _saved_bytes(small), _saved_bytes(large)
    layers = _layers(large, built.blocks)
    g = nx.DiGraph(model=spec.id, dataset=dataset, num_layers=len(built.blocks))
    for i, (a, b) in enumerate(zip(small, large, strict=True)):
        fwd = _slope(a.fwd_flops, b.fwd_flops)
        g.add_node(i, op=b.op, op_class=opcost.op_class(b.op), layer=layers[i], fwd_flops=fwd,
                   bwd_flops=fwd * opcost.backward_factor(b.op),
                   bytes_read=_slope(a.bytes_read, b.bytes_read),
                   bytes_written=_slope(a.bytes_written, b.bytes_written),
                   activation_bytes=_slope(saved_small[i], saved_large[i]), param_bytes=b.param_bytes)
        for p in b.inputs:
            g.add_edge(p, i, tensor_bytes=_slope(small[p].out_bytes, large[p].out_bytes))
    g.graph["param_bytes_total"] = float(sum(p.numel() * p.element_size() for p in built.module.parameters()))
    idle = [n for n, d in g.nodes(data=True) if g.degree(n) == 0 and d["fwd_flops"] == 0
            and d["param_bytes"] == 0]
    g.remove_nodes_from(idle)  # e.g. BatchNorm's num_batches_tracked counter
    return g


def build_model_graphs(model: str) -> str:
    """Extract the graphs of ``model`` on every catalog dataset and write its shipped JSON file."""
    from dltsched.engine.domain.catalog import model_catalog

    spec = model_catalog().get(model)
    path = write_graph_file(spec.id, {d: extract_graph(spec.id, d) for d in spec.datasets})
    return str(path)


def build_all_graphs(models: tuple[str, ...] = (), workers: int = 2) -> list[str]:
    """Rebuild the shipped graph files of ``models`` (default: every model with a builder)."""
    from concurrent.futures import ProcessPoolExecutor

    todo = models or tuple(BUILDERS)
    if workers <= 1:
        return [build_model_graphs(m) for m in todo]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(build_model_graphs, todo))

