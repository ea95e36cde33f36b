"""Cluster shapes: the ``"v100:8x8,p100:4x8"`` spec parser and the default mixed clusters.

A spec is comma-separated ``TYPE:NODESxGPUS_PER_NODE`` groups (``x`` or ``*``), optionally with
``@GBPS`` for the inter-node network (default 100): ``"v100:2x4,p100:1x4@25"``. Nodes are named
``<type>-<k>``, numbered per type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Cluster, Node, resolve_gpu_type

_GROUP = re.compile(
    r"^\s*(?P<type>[^:\s]+)\s*:\s*(?P<nodes>\d+)\s*[xX*]\s*(?P<gpus>\d+)\s*(?:@\s*(?P<gbps>[\d.]+))?\s*$"
)
SPEC_HELP = "TYPE:NODESxGPUS_PER_NODE[@GBPS], comma separated, e.g. 'v100:8x8,p100:4x8'"

#: GPU types of the default mixed cluster, as in Gavel's simulated clusters
DEFAULT_GPU_TYPES: tuple[str, ...] = ("v100", "p100", "k80")


def parse_cluster_spec(spec: str, *, path: str = "cluster") -> Cluster:
    """A :class:`Cluster` from a spec string (see module docstring).

    Parameters
    ----------
    spec
        ``TYPE:NODESxGPUS_PER_NODE[@GBPS]`` groups, comma separated.
    path
        The field name errors carry.

    Returns
    -------
    Cluster
        Nodes named ``<type>-<k>``, numbered per type.

    Raises
    ------
    ValidationError
        When the spec, a group, a GPU type or a size is not understood.
    """
    groups = [g for g in spec.split(",") if g.strip()] if isinstance(spec, str) else []
    if not groups:
        raise ValidationError(path, f"{spec!r} not understood; must be {SPEC_HELP}")
    nodes: list[Node] = []
    counters: dict[str, int] = {}
    for k, group in enumerate(groups):
        m = _GROUP.match(group)
        if not m:
            raise ValidationError(f"{path}[{k}]", f"{group.strip()!r} not understood; must be {SPEC_HELP}")
        try:
            gpu = resolve_gpu_type(m.group("type")).id
        except ValueError as err:
            raise ValidationError(f"{path}[{k}]", str(err)) from None
        num_nodes, per_node = int(m.group("nodes")), int(m.group("gpus"))
        if num_nodes < 1 or per_node < 1:
            raise ValidationError(
                f"{path}[{k}]", f"{group.strip()!r} not understood; nodes and GPUs must be >= 1"
            )
        gbps = float(m.group("gbps")) if m.group("gbps") else 100.0
        for _ in range(num_nodes):
            index = counters.get(gpu, 0)
            counters[gpu] = index + 1
            nodes.append(Node(f"{gpu}-{index}", gpu, per_node, gbps))
    return Cluster(tuple(nodes))


def format_cluster_spec(cluster: Cluster) -> str:
    """The spec string of a cluster (consecutive equal nodes grouped).

    Parameters
    ----------
    cluster
        The cluster.

    Returns
    -------
    str
        A spec :func:`parse_cluster_spec` reads back to the same shape.
    """
    parts: list[list[object]] = []
    for n in cluster.nodes:
        if (
            parts
            and parts[-1][0] == n.gpu_type
            and parts[-1][2] == n.num_gpus
            and parts[-1][3] == n.network_gbps
        ):
            parts[-1][1] = int(str(parts[-1][1])) + 1
        else:
            parts.append([n.gpu_type, 1, n.num_gpus, n.network_gbps])
    return ",".join(f"{t}:{c}x{g}" + ("" if b == 100.0 else f"@{b:g}") for t, c, g, b in parts)


def mixed_cluster(
    num_gpus: int,
    gpu_types: Sequence[str] = DEFAULT_GPU_TYPES,
    gpus_per_node: int = 4,
    network_gbps: float = 100.0,
) -> Cluster:
    """``ceil(num_gpus / gpus_per_node)`` nodes, GPU types dealt round-robin over the nodes
    (the first type gets the extra nodes); the last node holds the remainder.

    Parameters
    ----------
    num_gpus
        GPUs in all.
    gpu_types
        The GPU types, dealt in this order.
    gpus_per_node
        GPUs per node.
    network_gbps
        The inter-node network.

    Returns
    -------
    Cluster
        The cluster.

    Raises
    ------
    ValidationError
        When a count is not a positive integer or a GPU type is unknown.
    """
    if not isinstance(num_gpus, int) or num_gpus < 1:
        raise ValidationError("num_gpus", f"{num_gpus!r} not understood; must be an integer >= 1")
    if not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise ValidationError("gpus_per_node", f"{gpus_per_node!r} not understood; must be an integer >= 1")
    if not gpu_types:
        raise ValidationError("gpu_types", "empty; name at least one GPU type")
    types = []
    for k, t in enumerate(gpu_types):
        try:
            types.append(resolve_gpu_type(t).id)
        except ValueError as err:
            raise ValidationError(f"gpu_types[{k}]", str(err)) from None
    num_nodes = math.ceil(num_gpus / gpus_per_node)
    counters: dict[str, int] = {}
    nodes = []
    for i in range(num_nodes):
        gpu = types[i % len(types)]
        size = min(gpus_per_node, num_gpus - i * gpus_per_node)
        index = counters.get(gpu, 0)
        counters[gpu] = index + 1
        nodes.append(Node(f"{gpu}-{index}", gpu, size, network_gbps))
    return Cluster(tuple(nodes))


def default_cluster_for(largest_job_gpus: int, mean_demand_gpus: float) -> Cluster:
    """The documented default for traces without a cluster: v100, p100 and k80 nodes of 8 GPUs,
    the same number per type, enough that every type hosts the largest job and the three together
    hold the trace's mean concurrent GPU demand (sum of GPU-seconds / trace span).

    Parameters
    ----------
    largest_job_gpus
        GPUs of the trace's largest job.
    mean_demand_gpus
        The trace's mean concurrent GPU demand.

    Returns
    -------
    Cluster
        The cluster.
    """
    per_type = max(math.ceil(mean_demand_gpus / len(DEFAULT_GPU_TYPES)), largest_job_gpus, 8)
    nodes_per_type = math.ceil(per_type / 8)
    return parse_cluster_spec(",".join(f"{t}:{nodes_per_type}x8" for t in DEFAULT_GPU_TYPES))
