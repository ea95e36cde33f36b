"""Interchangeable empty nodes, aggregated: one candidate per unit and node class, expanded to nodes when
mapping.

**Node class.** Nodes of one GPU type with the same number of GPUs, none down and nobody running there now,
are interchangeable: a plan that puts a gang on one of them can put it on any other. A class of at least two
such nodes is *aggregated* when the gang sizes that may use it divide each other and the node size (1, 2, 4
and 8 GPUs on 8-GPU nodes): a multi-GPU unit offered any node of the class is offered the class instead, one
candidate (kind ``class``, ``where`` the class's index) that takes ``num_gpus`` GPUs of some node of it, and
one capacity row per class (its GPUs in all) stands for the rows of its nodes.

**Exact.** With such sizes, any set of units whose GPUs add up to at most the class's fits its nodes when
placed largest first, each on the first node with room (first-fit decreasing: every node's free GPUs stay a
multiple of the size being placed), so the class row loses no plan and admits none that does not fit.
:func:`place_in_class` is that placement; the mapping uses it and the independent checker checks the
concrete plan. A class whose sizes do not divide (a 3-GPU gang on 8-GPU nodes) is not aggregated: its nodes
keep a candidate each, as does every node that is busy, partly down or alone in its class.

How to call it: ``classes = empty_node_classes(problem)`` gives the aggregated classes of a round (a function
of the round alone, so any code holding the :class:`~dltsched.formulations.problem.RoundProblem` gets the same
classes and indices); ``class_of(classes)`` maps each aggregated node to its class; ``place_in_class(cls,
free, size)`` picks the node of a class for one more gang, given each node's free GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dltsched.formulations.problem import RoundProblem

__all__ = ["NodeClass", "class_of", "divides_chain", "empty_node_classes", "empty_nodes_by_shape",
           "place_in_class"]


@dataclass(frozen=True, slots=True)
class NodeClass:
    """Interchangeable empty nodes of one GPU type (see the module docstring).

    Attributes
    ----------
    gpu_type
        Their GPU type.
    nodes
        Their indices in the round, ascending.
    gpus_each
        GPUs of each node (all usable).
    """

    gpu_type: str
    nodes: tuple[int, ...]
    gpus_each: int

    @property
    def capacity(self) -> int:
        """GPUs of the class in all."""
        return len(self.nodes) * self.gpus_each


def divides_chain(sizes: Iterable[int], node_gpus: int) -> bool:
    """Whether the distinct ``sizes``, in increasing order, each divide the next and ``node_gpus`` (sizes
    above ``node_gpus`` are left out: they never use one node).

    Parameters
    ----------
    sizes
        Gang sizes (GPUs).
    node_gpus
        GPUs of one node.

    Returns
    -------
    bool
        True when first-fit decreasing packs any set of such gangs whose GPUs add up to at most the nodes'.
    """
    chain = sorted({s for s in sizes if s <= node_gpus} | {node_gpus})
    return all(b % a == 0 for a, b in zip(chain, chain[1:], strict=False))


def empty_nodes_by_shape(problem: RoundProblem) -> dict[tuple[str, int], list[int]]:
    """The empty, fully usable nodes of ``problem`` (nobody running there, no GPU down), grouped by (GPU type,
    GPUs): the nodes a plan may use interchangeably.

    Parameters
    ----------
    problem
        The round.

    Returns
    -------
    dict[tuple[str, int], list[int]]
        The nodes of each shape, ascending; the shapes in the order of their first node.
    """
    node_of = problem.node_of
    busy = {node_of[g] for job in problem.jobs for g in job.current_gpus}
    members: dict[tuple[str, int], list[int]] = {}
    for n, node in enumerate(problem.nodes):
        if n not in busy and not node.down_gpus:
            members.setdefault((node.gpu_type, node.num_gpus), []).append(n)
    return members


def empty_node_classes(problem: RoundProblem) -> tuple[NodeClass, ...]:
    """The aggregated node classes of ``problem`` (see the module docstring), in the order of their first
    node.

    Parameters
    ----------
    problem
        The round.

    Returns
    -------
    tuple of NodeClass
        Classes of at least two empty, fully usable nodes of one type and size whose gang sizes divide the
        node size; a candidate of kind ``class`` names its class by its index here.
    """
    members = empty_nodes_by_shape(problem)
    sizes: dict[str, set[int]] = {}
    for job in problem.jobs:
        if job.num_gpus > 1:
            for o in job.options:
                sizes.setdefault(o.gpu_type, set()).add(job.num_gpus)
    return tuple(NodeClass(gpu_type, tuple(nodes), gpus)
                 for (gpu_type, gpus), nodes in members.items()
                 if len(nodes) > 1 and divides_chain(sizes.get(gpu_type, ()), gpus))


def class_of(classes: Sequence[NodeClass]) -> dict[int, int]:
    """Node -> the index of its class, for the nodes of ``classes``.

    Parameters
    ----------
    classes
        Classes from :func:`empty_node_classes`.

    Returns
    -------
    dict[int, int]
        The class of every aggregated node.
    """
    return {n: k for k, cls in enumerate(classes) for n in cls.nodes}


def place_in_class(cls: NodeClass, free: Sequence[Sequence[int]], size: int) -> int:
    """The node of ``cls`` that takes one more gang of ``size`` GPUs: the first with room.

    Called for a class's gangs largest first (first-fit decreasing), every gang finds room when their GPUs add
    up to at most the class's (see the module docstring).

    Parameters
    ----------
    cls
        The class.
    free
        Per node of the round, its free GPUs.
    size
        GPUs of the gang.

    Returns
    -------
    int
        The node.

    Raises
    ------
    RuntimeError
        When no node of the class has room (its capacity was exceeded, or sizes placed out of order).
    """
    for n in cls.nodes:
        if len(free[n]) >= size:
            return n
    raise RuntimeError(f"capacity bookkeeping broken: no {cls.gpu_type} node of class {cls.nodes[:3]}... has "
                       f"{size} free GPUs")
