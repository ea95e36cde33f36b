"""The E-GGAT's group graph and its forward pass in numpy: the trained network at schedule time, no torch.

:func:`group_graph_arrays` builds one co-located group's graph (the layout of :mod:`.egat`'s module docstring)
as numpy arrays; :func:`.egat.group_graph` turns the same arrays into the PyG ``Data`` the network trains on,
so both see one graph. :class:`NumpyEggat` reads a checkpoint written by :meth:`.train.EggatPredictor.save`
(the safetensors numpy API) or takes a trained network's weights, and runs what :class:`.egat.EGGAT` runs:
input standardisation, GATv2 attention with edge features (self-loops added with the mean of each node's
incoming edge features, leaky ReLU 0.2, softmax over each node's incoming edges), the gated residual and layer
norm, mean and hub pooling per job and group, and the speed and group heads residual over the graph's priors.
Many groups run as one disjoint graph; the tests hold it to the torch model within 1e-5.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from dltsched.engine.domain.catalog import model_spec
from dltsched.engine.domain.errors import ValidationError
from dltsched.predictors.colocation.features import (
    GPU_FEATURES,
    JOB_FEATURES,
    PAIR_FEATURES,
    Group,
    check_group,
    contention_log_speeds,
    gpu_features,
    job_features,
    pair_features,
    resolve_gpu,
    summed_isolated_memory_mib,
    union_util,
)
from dltsched.predictors.colocation.graphs import NODE_FEATURES, coarse_graph, node_features
from dltsched.predictors.colocation.metrics import GroupPrediction
from dltsched.predictors.colocation.samples import LUCID_GPU, ColocDataset, IsolatedProfile, JobSpec

IN_FEATURES = NODE_FEATURES + len(JOB_FEATURES) + len(PAIR_FEATURES) + 1
EDGE_FEATURES = 4  # log1p(tensor MiB), flow, hub, cross-job
GLOBAL_FEATURES = len(GPU_FEATURES) + 1
LOG_MAX_SPEED = math.log(2.0)  # co-located speeds stay below 2x isolated
UTIL_CLAMP = 0.02  # priors kept inside (2%, 98%) before the logit
#: the checkpoint of the shipped network (trained on Gavel's MIT-licensed pairs)
SHIPPED_EGGAT = "eggat_gavel.safetensors"
_HUB_EDGE = (0.0, 0.0, 1.0, 0.0)
_CROSS_EDGE = (0.0, 0.0, 0.0, 1.0)


@dataclass(frozen=True, slots=True)
class GroupGraph:
    """One group's graph: node features ``x``, edges ``src -> dst`` with ``edge_attr``, which nodes are hubs,
    each node's job (0..``num_jobs``-1), the global features and the priors the heads are residual over."""

    x: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    edge_attr: np.ndarray
    hub_mask: np.ndarray
    job_of: np.ndarray
    glob: np.ndarray
    speed_prior: np.ndarray
    util_logit_prior: float
    num_jobs: int


def _job_block(gpu: str, job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A job's node rows (super-nodes, then its hub) and its own edges (data flow both ways, then hub <-> each
    super-node), local indices."""
    graph = coarse_graph(job.model, job.dataset)
    jf = [*job_features(job, isolated.get((gpu, job))), *pair_features(gpu, job, isolated)]
    rows = [[*node_features(n, job.batch_size, job.amp), *jf, 0.0] for n in graph.nodes]
    rows.append([0.0] * NODE_FEATURES + jf + [1.0])  # hub
    src: list[int] = []
    dst: list[int] = []
    attr: list[tuple[float, ...]] = []
    for s, d, mib in graph.edges:
        w = (math.log1p(mib), 1.0, 0.0, 0.0)
        src += (s, d)
        dst += (d, s)
        attr += (w, w)
    hub = len(graph.nodes)
    for n in range(hub):
        src += (n, hub)
        dst += (hub, n)
        attr += (_HUB_EDGE, _HUB_EDGE)
    return (np.asarray(rows, dtype=float), np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
            np.asarray(attr, dtype=float).reshape(-1, EDGE_FEATURES))


def group_graph_arrays(group: Group, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                       memo: dict[Any, Any] | None = None) -> GroupGraph:
    """The graph of one co-located group (see :mod:`.egat`); ``memo`` keeps each job's block between groups
    that share ``isolated``."""
    blocks = []
    for job in group.jobs:
        found = memo.get((group.gpu, job)) if memo is not None else None
        if found is None:
            found = _job_block(group.gpu, job, isolated)
            if memo is not None:
                memo[(group.gpu, job)] = found
        blocks.append(found)
    bases = np.cumsum([0, *(len(b[0]) for b in blocks)])
    hubs = bases[1:] - 1
    src = [b[1] + base for b, base in zip(blocks, bases, strict=False)]
    dst = [b[2] + base for b, base in zip(blocks, bases, strict=False)]
    attr = [b[3] for b in blocks]
    for i, (base, hub) in enumerate(zip(bases[:-1], hubs, strict=True)):
        for j, other in enumerate(hubs):
            if i != j:  # hub -> the other hub, then each super-node -> the other hub
                src.append(np.concatenate(([hub], np.arange(base, hub))))
                dst.append(np.full(hub - base + 1, other))
                attr.append(np.tile(_CROSS_EDGE, (hub - base + 1, 1)))
    job_of = np.repeat(np.arange(len(blocks)), [len(b[0]) for b in blocks])
    hub_mask = np.zeros(bases[-1], dtype=bool)
    hub_mask[hubs] = True
    glob, speed_prior, util_logit_prior = group_globals(group, isolated)
    return GroupGraph(np.concatenate([b[0] for b in blocks]), np.concatenate(src), np.concatenate(dst),
                      np.concatenate(attr), hub_mask, job_of, glob, speed_prior, util_logit_prior,
                      len(group.jobs))


def group_globals(group: Group, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]
                  ) -> tuple[np.ndarray, np.ndarray, float]:
    """A group's global features (GPU, group size), per-job speed prior and utilisation prior (a logit)."""
    util = union_util(group, isolated)
    prior = min(1.0 - UTIL_CLAMP, max(UTIL_CLAMP, util / 100.0)) if util is not None else 0.5
    return (np.asarray([*gpu_features(group.gpu), float(len(group.jobs))]),
            np.asarray(contention_log_speeds(group, isolated), dtype=float), math.log(prior / (1.0 - prior)))


def check_eggat_group(group: Group, max_jobs: int, gpus: Sequence[str]) -> None:
    """Clear errors for inputs the network cannot featurize: GPU or model not in the catalogs, group size.

    Catalog GPUs absent from training are predicted from their spec sheet (the leave-one-GPU-out figures say
    how well); Lucid's unrecorded GPU only by a network trained on it.
    """
    check_group(group, max_jobs)
    if resolve_gpu(group.gpu) == LUCID_GPU and LUCID_GPU not in gpus:
        raise ValidationError("gpu", f"'{LUCID_GPU}' not understood by a model trained on {', '.join(gpus)}")
    for i, job in enumerate(group.jobs):
        try:
            model_spec(job.model).dataset(job.dataset)
        except ValueError as err:
            raise ValidationError(f"jobs[{i}].model", str(err)) from None


# ---------------------------------------------------------------------------------------- forward pass


def _linear(w: Mapping[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    out = x @ w[f"{name}.weight"].T
    bias = w.get(f"{name}.bias")
    return out + bias if bias is not None else out


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return expit(x)  # type: ignore[no-any-return]


def _segment(values: np.ndarray, starts: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    return ufunc.reduceat(values, starts, axis=0)  # type: ignore[no-any-return]


def _gatv2(w: Mapping[str, np.ndarray], name: str, heads: int, h: np.ndarray, src: np.ndarray,
           dst: np.ndarray, attr: np.ndarray) -> np.ndarray:
    """``GATv2Conv(edge_dim=...)`` with its defaults (self-loops with mean edge features, concatenated
    heads)."""
    n = len(h)
    attr = attr.astype(h.dtype)
    x_l = _linear(w, f"{name}.lin_l", h).reshape(n, heads, -1)
    x_r = _linear(w, f"{name}.lin_r", h).reshape(n, heads, -1)
    count = np.bincount(dst, minlength=n)
    loop_attr = np.zeros((n, attr.shape[1]), dtype=attr.dtype)
    np.add.at(loop_attr, dst, attr)
    loop_attr /= np.maximum(count, 1)[:, None]
    src = np.concatenate((src, np.arange(n)))
    dst = np.concatenate((dst, np.arange(n)))
    order = np.argsort(dst, kind="stable")  # each node's incoming edges in one run (every node has its loop)
    src, dst = src[order], dst[order]
    edge = (np.concatenate((attr,
                            loop_attr))[order] @ w[f"{name}.lin_edge.weight"].T).reshape(len(src), heads, -1)
    z = x_l[src] + x_r[dst] + edge
    z = np.where(z > 0, z, 0.2 * z)
    logit = (z * w[f"{name}.att"]).sum(-1)
    starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
    ex = np.exp(logit - _segment(logit, starts, np.maximum)[dst])
    alpha = ex / (_segment(ex, starts, np.add)[dst] + 1e-16)
    out = _segment(x_l[src] * alpha[..., None], starts, np.add)
    return out.reshape(n, -1) + w[f"{name}.bias"]


def _logits(w: Mapping[str, np.ndarray], name: str, x_src: np.ndarray, x_dst: np.ndarray,
            attr: np.ndarray) -> np.ndarray:
    """GATv2's attention logits of edges (one row each; ``attr``: one row, or one per edge) per head."""
    heads, c = x_src.shape[-2:]
    edge = (np.atleast_2d(attr).astype(x_src.dtype) @ w[f"{name}.lin_edge.weight"].T).reshape(-1, heads, c)
    z = x_src + x_dst
    z += edge
    np.maximum(z, 0.2 * z, out=z)  # leaky ReLU, slope 0.2
    # (H, C): one block per head of a (H C, H) matrix, so one product gives every head
    att = w[f"{name}.att"][0]
    block = np.zeros((heads * c, heads), dtype=att.dtype)
    block[np.arange(heads * c), np.repeat(np.arange(heads), c)] = att.reshape(-1)
    return z.reshape(len(z), -1) @ block  # type: ignore[no-any-return]


Partial = tuple[np.ndarray, np.ndarray, np.ndarray]


def _partial(logit: np.ndarray, values: np.ndarray, starts: np.ndarray) -> Partial:
    """One softmax's running parts per run of edges (edges sorted by target; ``starts``: each run's first
    edge): the largest logit ``M``, ``sum exp(l - M)`` and ``sum exp(l - M) x``; merged with
    :func:`_merge`."""
    top = np.maximum.reduceat(logit, starts, 0)
    ex = np.exp(logit - np.repeat(top, np.diff(np.r_[starts, len(logit)]), 0))
    return top, np.add.reduceat(ex, starts, 0), np.add.reduceat(values * ex[..., None], starts, 0)


def _merge(*parts: Partial) -> np.ndarray:
    """The softmax-weighted sum over the edges of every part (aligned rows), as PyG's softmax and sum give
    it."""
    top = parts[0][0]
    for p in parts[1:]:
        top = np.maximum(top, p[0])
    total = sum(p[1] * np.exp(p[0] - top) for p in parts)
    summed = sum(p[2] * np.exp(p[0] - top)[..., None] for p in parts)
    return summed / (total + 1e-16)[..., None]  # type: ignore[no-any-return]


def _layer_norm(w: Mapping[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _mlp(w: Mapping[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    return _linear(w, f"{name}.2", _gelu(_linear(w, f"{name}.0", x)))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + k) for s, k in zip(starts, lengths)])`` without the loop."""
    total = int(lengths.sum())
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(total) + shift  # type: ignore[no-any-return]


def _mean_by(values: np.ndarray, index: np.ndarray, size: int) -> np.ndarray:
    total = np.zeros((size, values.shape[1]))
    np.add.at(total, index, values)
    return total / np.maximum(np.bincount(index, minlength=size), 1)[:, None]


@dataclass(frozen=True, slots=True)
class _Job:
    """What a two-layer network computes for one job on one GPU whatever its partners (see :meth:`NumpyEggat.
    log_speeds`): its super-nodes receive only from their own job in the first layer, and in the second from
    their own job and their hub."""

    n: int  # super-nodes
    h0_hub: np.ndarray  # (D,) the hub's input embedding
    xl0: np.ndarray  # (n + 1, H, C) first-layer sources: super-nodes, then the hub
    xr0_hub: np.ndarray  # (H, C)
    own0: Partial  # first layer, super-nodes -> own hub
    h1: np.ndarray  # (n, D) super-nodes after the first layer
    xl1: np.ndarray  # (n, H, C)
    xr1: np.ndarray  # (n, H, C)
    local1: Partial  # second layer into each super-node from its own job's super-nodes and itself


@dataclass(slots=True)
class NumpyEggat:
    """A trained E-GGAT run in numpy (see module docstring); a :class:`~.metrics.GroupPredictor`."""

    weights: Mapping[str, np.ndarray]
    heads: int = 4
    num_layers: int = 2
    max_jobs: int = 3
    has_memory: bool = False
    has_util: bool = False
    gpus: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    record: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_meta(cls, weights: Mapping[str, Any], meta: Mapping[str, Any]) -> NumpyEggat:
        """From a state dict (numpy arrays) and the checkpoint's metadata (``config``, ``has_memory``,
        ...)."""
        c = meta["config"]
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}  # as trained: float32
        return cls(arrays, int(c["heads"]), int(c["num_layers"]), int(c["max_jobs"]),
                   bool(meta["has_memory"]), bool(meta["has_util"]), tuple(meta["gpus"]),
                   tuple(meta["models"]), dict(meta.get("record", {})))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NumpyEggat:
        """A checkpoint of :meth:`.train.EggatPredictor.save` (weights, and JSON config in its metadata)."""
        from safetensors import safe_open
        from safetensors.numpy import load_file

        try:
            with safe_open(str(path), framework="np") as fh:
                meta = json.loads((fh.metadata() or {})["dltsched"])
        except (OSError, KeyError, ValueError) as err:
            raise ValidationError("model", f"'{path}' is not an E-GGAT checkpoint ({err})") from None
        return cls.from_meta(load_file(str(path)), meta)

    def check(self, group: Group) -> None:
        """Refuse a group the network cannot featurize (see :func:`check_eggat_group`).

        Parameters
        ----------
        group
            The group.
        """
        check_eggat_group(group, self.max_jobs, self.gpus)

    def saw(self, feature: str) -> bool:
        """Whether job feature ``feature`` (:data:`~.features.JOB_FEATURES`) ever differed from 0 in training:
        a network trained where isolated memory or utilisation was never measured (the shipped, Gavel one)
        keeps them at 0 (its input standardisation would put a measured value tens of deviations out)."""
        k = NODE_FEATURES + JOB_FEATURES.index(feature)
        return bool(self.weights["x_mean"][k] != 0.0 or self.weights["x_std"][k] > 0.1 + 1e-6)

    def forward(self, graphs: Sequence[GroupGraph]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log speed per job, in the graphs' order; log memory ratio per group; GPU util fraction per
        group)."""
        w = self.weights
        sizes = np.asarray([len(g.x) for g in graphs])
        offsets = np.cumsum(sizes) - sizes
        x = np.concatenate([g.x for g in graphs])
        src = np.concatenate([g.src + o for g, o in zip(graphs, offsets, strict=True)])
        dst = np.concatenate([g.dst + o for g, o in zip(graphs, offsets, strict=True)])
        attr = np.concatenate([g.edge_attr for g in graphs])
        h = _linear(w, "embed", ((x - w["x_mean"]) / w["x_std"]).astype(w["embed.weight"].dtype))
        for k in range(self.num_layers):
            m = _gatv2(w, f"layers.{k}.conv", self.heads, h, src, dst, attr)
            g = _sigmoid(_linear(w, f"layers.{k}.gate", np.concatenate((h, m), -1)))
            h = _layer_norm(w, f"layers.{k}.norm", h + g * m)
        num_jobs = np.asarray([g.num_jobs for g in graphs])
        n_groups, n_jobs = len(graphs), int(num_jobs.sum())
        glob = (np.stack([g.glob for g in graphs]) - w["g_mean"]) / w["g_std"]
        job = np.repeat(np.cumsum(num_jobs) - num_jobs, sizes) + np.concatenate([g.job_of for g in graphs])
        job_mean = _mean_by(h, job, n_jobs)
        hub_mask = np.concatenate([g.hub_mask for g in graphs])
        hub = np.zeros_like(job_mean)
        hub[job[hub_mask]] = h[hub_mask]
        graph_of_job = np.repeat(np.arange(n_groups), num_jobs)
        group_sum = np.zeros((n_groups, h.shape[1]))
        np.add.at(group_sum, graph_of_job, hub)
        prior = np.concatenate([g.speed_prior for g in graphs])
        z = _mlp(w, "speed_head", np.concatenate((hub, job_mean, group_sum[graph_of_job] - hub,
                                                   glob[graph_of_job], prior[:, None]), -1))[:, 0]
        log_speed = np.minimum(prior + z, LOG_MAX_SPEED)
        group_mean = _mean_by(h, np.repeat(np.arange(n_groups), sizes), n_groups)
        out = _mlp(w, "group_head", np.concatenate((group_sum, group_mean, glob), -1))
        util_prior = np.asarray([g.util_logit_prior for g in graphs])
        return log_speed, out[:, 0], _sigmoid(util_prior + out[:, 1])

    def log_speeds(self, groups: Sequence[Group],
                   isolated: Sequence[Mapping[tuple[str, JobSpec], IsolatedProfile]],
                   memo: dict[Any, Any] | None = None, chunk: int = 4096) -> np.ndarray:
        """Every job's predicted log speed, group after group (groups checked by the caller); ``isolated[i]``
        supplies group ``i``'s profiles, and ``memo`` keeps what each (GPU, job) contributes between calls (it
        must then be read the same way in every group).

        A two-layer network (the shipped one) takes a shorter road to the same numbers: a job's super-nodes
        hear only their own job in the first layer, so their states, and in the second layer their attention
        over their own job, are computed once per (GPU, job) and merged with the one edge from their hub per
        group (softmax parts merged exactly); the hubs' edges are computed per group. Deeper networks run
        :meth:`forward`.
        """
        memo = {} if memo is None else memo
        parts = []
        for start in range(0, len(groups), chunk):
            part, views = groups[start:start + chunk], isolated[start:start + chunk]
            if self.num_layers == 2:
                parts.append(self._two_layer_log_speeds(part, views, memo))
            else:
                parts.append(self.forward([group_graph_arrays(g, iso, memo) for g, iso in
                                           zip(part, views, strict=True)])[0])
        return np.concatenate(parts) if parts else np.zeros(0)

    def _job(self, gpu: str, job: JobSpec, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
             memo: dict[Any, Any]) -> _Job:
        key = ("job", gpu, job)
        found = memo.get(key)
        if found is not None:
            return found  # type: ignore[no-any-return]
        w, heads = self.weights, self.heads
        rows, src, dst, attr = _job_block(gpu, job, isolated)
        n = len(rows) - 1
        h0 = _linear(w, "embed", ((rows - w["x_mean"]) / w["x_std"]).astype(w["embed.weight"].dtype))
        # exact for the super-nodes: all their edges are here
        m = _gatv2(w, "layers.0.conv", heads, h0, src, dst, attr)
        g = _sigmoid(_linear(w, "layers.0.gate", np.concatenate((h0, m), -1)))
        h1 = _layer_norm(w, "layers.0.norm", h0 + g * m)[:n]
        xl0 = _linear(w, "layers.0.conv.lin_l", h0).reshape(n + 1, heads, -1)
        xr0_hub = _linear(w, "layers.0.conv.lin_r", h0[n]).reshape(heads, -1)
        own0 = _partial(_logits(w, "layers.0.conv", xl0[:n], xr0_hub[None], np.asarray(_HUB_EDGE)), xl0[:n],
                        np.zeros(1, dtype=np.int64))
        xl1 = _linear(w, "layers.1.conv.lin_l", h1).reshape(n, heads, -1)
        xr1 = _linear(w, "layers.1.conv.lin_r", h1).reshape(n, heads, -1)
        # second layer into the super-nodes, less the hub's edge: data flow and the self-loop, whose edge
        # features are the mean of every incoming edge's (the hub's included)
        loop_attr = np.zeros((n + 1, EDGE_FEATURES))
        np.add.at(loop_attr, dst, attr)
        loop_attr = loop_attr[:n] / np.bincount(dst, minlength=n + 1)[:n, None]
        flow = (src < n) & (dst < n)
        s1 = np.concatenate((src[flow], np.arange(n)))
        d1 = np.concatenate((dst[flow], np.arange(n)))
        a1 = np.concatenate((attr[flow], loop_attr))
        order = np.argsort(d1, kind="stable")
        s1, d1, a1 = s1[order], d1[order], a1[order]
        starts = np.flatnonzero(np.r_[True, d1[1:] != d1[:-1]])
        local1 = _partial(_logits(w, "layers.1.conv", xl1[s1], xr1[d1], a1), xl1[s1], starts)
        found = memo[key] = _Job(n, h0[n], xl0, xr0_hub, (own0[0][0], own0[1][0], own0[2][0]), h1, xl1, xr1,
                                 local1)
        return found

    def _pair0(self, a: _Job, b: _Job, key: tuple[Any, ...], memo: dict[Any, Any]) -> Partial:
        """First layer: ``b``'s super-nodes and hub -> ``a``'s hub (cross-job edges)."""
        found = memo.get(key)
        if found is None:
            p = _partial(_logits(self.weights, "layers.0.conv", b.xl0, a.xr0_hub[None],
                                 np.asarray(_CROSS_EDGE)),
                         b.xl0, np.zeros(1, dtype=np.int64))
            found = memo[key] = (p[0][0], p[1][0], p[2][0])
        return found  # type: ignore[no-any-return]

    def _two_layer_log_speeds(self, groups: Sequence[Group],
                              isolated: Sequence[Mapping[tuple[str, JobSpec], IsolatedProfile]],
                              memo: dict[Any, Any]) -> np.ndarray:
        """:meth:`log_speeds` of a two-layer network (see there): the same numbers as :meth:`forward`."""
        w, heads = self.weights, self.heads
        names: dict[tuple[str, JobSpec], int] = {}  # (GPU, job) -> row of the tables below
        jobs: list[_Job] = []
        slot_job: list[int] = []  # one slot per member of every group
        glob: list[np.ndarray] = []
        prior: list[np.ndarray] = []
        pairs_m: list[list[np.ndarray]] = []
        pairs_b: list[list[np.ndarray]] = []
        pairs_a: list[list[np.ndarray]] = []
        sizes = []
        for g, iso in zip(groups, isolated, strict=True):
            ids = []
            for job in g.jobs:
                k = names.get((g.gpu, job))
                if k is None:
                    k = names[(g.gpu, job)] = len(jobs)
                    jobs.append(self._job(g.gpu, job, iso, memo))
                ids.append(k)
            slot_job.extend(ids)
            sizes.append(len(ids))
            gl, sp, _ = group_globals(g, iso)
            glob.append(gl)
            prior.append(sp)
            # first layer into each hub: the other members' nodes (padded to max_jobs - 1)
            for i, a in enumerate(ids):
                others = [self._pair0(jobs[a], jobs[b], ("pair", g.gpu, g.jobs[i], g.jobs[j]), memo)
                          for j, b in enumerate(ids) if j != i]
                others += [(np.full(heads, -np.inf, dtype=np.float32), np.zeros(heads, dtype=np.float32),
                            np.zeros_like(others[0][2]))] * (
                    self.max_jobs - len(ids))
                pairs_m.append([p[0] for p in others])
                pairs_b.append([p[1] for p in others])
                pairs_a.append([p[2] for p in others])
        size = np.asarray(sizes)
        slots = np.asarray(slot_job)
        n = np.asarray([j.n for j in jobs])
        group_of_slot = np.repeat(np.arange(len(groups)), size)
        first_slot = np.cumsum(size) - size
        # ---- first layer, hubs: own super-nodes, the others' nodes, the self-loop (mean of the incoming
        # features)
        n_slot = n[slots]
        others_n = np.add.reduceat(n_slot + 1, first_slot)[group_of_slot] - (n_slot + 1)
        loop_attr = np.zeros((len(slots), EDGE_FEATURES))
        loop_attr[:, 2], loop_attr[:, 3] = n_slot, others_n
        loop_attr /= (n_slot + others_n)[:, None]
        h0_hub = np.stack([j.h0_hub for j in jobs])[slots]
        xl0_hub = np.stack([j.xl0[-1] for j in jobs])[slots]
        xr0_hub = np.stack([j.xr0_hub for j in jobs])[slots]
        own = tuple(np.stack([j.own0[k] for j in jobs])[slots] for k in range(3))
        loop = (_logits(w, "layers.0.conv", xl0_hub, xr0_hub, loop_attr),
                np.ones((len(slots), heads), dtype=xl0_hub.dtype), xl0_hub)
        pm, pb, pa = np.asarray(pairs_m), np.asarray(pairs_b), np.asarray(pairs_a)
        cross = [(pm[:, k], pb[:, k], pa[:, k]) for k in range(pm.shape[1])]
        m0 = _merge(own, loop, *cross).reshape(len(slots),
                                               -1) + w["layers.0.conv.bias"]  # type: ignore[arg-type]
        g0 = _sigmoid(_linear(w, "layers.0.gate", np.concatenate((h0_hub, m0), -1)))
        h1_hub = _layer_norm(w, "layers.0.norm", h0_hub + g0 * m0)
        xl1_hub = _linear(w, "layers.1.conv.lin_l", h1_hub).reshape(len(slots), heads, -1)
        xr1_hub = _linear(w, "layers.1.conv.lin_r", h1_hub).reshape(len(slots), heads, -1)
        # ---- second layer, super-nodes: their own job's part (kept per job) merged with their hub's edge
        sup_first = np.cumsum(n) - n
        inst_slot = np.repeat(np.arange(len(slots)), n_slot)
        inst = _ranges(sup_first[slots], n_slot)
        h1 = np.concatenate([j.h1 for j in jobs])
        xl1 = np.concatenate([j.xl1 for j in jobs])
        xr1 = np.concatenate([j.xr1 for j in jobs])
        local = tuple(np.concatenate([j.local1[k] for j in jobs])[inst] for k in range(3))
        hub_edge = (_logits(w, "layers.1.conv", xl1_hub[inst_slot], xr1[inst], np.asarray(_HUB_EDGE)),
                    np.ones((len(inst), heads), dtype=xl1_hub.dtype), xl1_hub[inst_slot])
        m1 = _merge(local, hub_edge).reshape(len(inst),
                                             -1) + w["layers.1.conv.bias"]  # type: ignore[arg-type]
        g1 = _sigmoid(_linear(w, "layers.1.gate", np.concatenate((h1[inst], m1), -1)))
        h2 = _layer_norm(w, "layers.1.norm", h1[inst] + g1 * m1)
        # ---- second layer, hubs: own super-nodes (the instances above), the others' super-nodes, every hub
        # of the group (the others' by cross-job edges, its own by the self-loop); each part already runs by
        # target
        inst_first = np.cumsum(n_slot) - n_slot
        own1 = _partial(_logits(w, "layers.1.conv", xl1[inst], xr1_hub[inst_slot], np.asarray(_HUB_EDGE)),
                        xl1[inst], inst_first)
        seg_first, seg_len, seg_dst = [], [], []
        for q in range(len(slots)):
            gq = group_of_slot[q]
            for k in range(first_slot[gq], first_slot[gq] + size[gq]):
                if k != q:
                    seg_first.append(sup_first[slots[k]])
                    seg_len.append(n[slots[k]])
                    seg_dst.append(q)
        lengths = np.asarray(seg_len)
        c_src = _ranges(np.asarray(seg_first), lengths)
        c_dst = np.repeat(np.asarray(seg_dst), lengths)
        c_counts = np.bincount(c_dst, minlength=len(slots))
        cross1 = _partial(_logits(w, "layers.1.conv", xl1[c_src], xr1_hub[c_dst], np.asarray(_CROSS_EDGE)),
                          xl1[c_src], np.cumsum(c_counts) - c_counts)
        hub_src = _ranges(first_slot[group_of_slot], size[group_of_slot])
        hub_dst = np.repeat(np.arange(len(slots)), size[group_of_slot])
        hub_attr = np.where((hub_src == hub_dst)[:, None], loop_attr[hub_dst], _CROSS_EDGE)
        hub_part = _partial(_logits(w, "layers.1.conv", xl1_hub[hub_src], xr1_hub[hub_dst], hub_attr),
                            xl1_hub[hub_src], np.cumsum(size[group_of_slot]) - size[group_of_slot])
        m1_hub = _merge(own1, cross1, hub_part).reshape(len(slots), -1) + w["layers.1.conv.bias"]
        g1_hub = _sigmoid(_linear(w, "layers.1.gate", np.concatenate((h1_hub, m1_hub), -1)))
        h2_hub = _layer_norm(w, "layers.1.norm", h1_hub + g1_hub * m1_hub)
        # ---- heads
        inst_sum = np.add.reduceat(h2, inst_first, 0)
        job_mean = (inst_sum + h2_hub) / (n_slot + 1)[:, None]
        group_sum = np.add.reduceat(h2_hub, first_slot, 0)
        g_norm = (np.stack(glob) - w["g_mean"]) / w["g_std"]
        speed_prior = np.concatenate(prior)
        z = _mlp(w, "speed_head", np.concatenate((h2_hub, job_mean, group_sum[group_of_slot] - h2_hub,
                                                   g_norm[group_of_slot], speed_prior[:, None]), -1))[:, 0]
        return np.minimum(speed_prior + z, LOG_MAX_SPEED)  # type: ignore[no-any-return]

    def predict(self, groups: Sequence[Group], data: ColocDataset,
                chunk: int = 1024) -> list[GroupPrediction]:
        """Predictions for ``groups`` (as :meth:`.train.EggatPredictor.predict`); ``data.isolated`` supplies
        the isolated profiles."""
        for g in groups:
            self.check(g)
        memo: dict[Any, Any] = {}
        out: list[GroupPrediction] = []
        for start in range(0, len(groups), chunk):
            part = groups[start:start + chunk]
            log_speed, log_mem, util = self.forward([group_graph_arrays(g, data.isolated, memo)
                                                     for g in part])
            out += head_predictions(part, np.exp(log_speed).tolist(), log_mem, util, data.isolated,
                                    self.has_memory, self.has_util)
        return out


def head_predictions(groups: Sequence[Group], speeds: Sequence[float], log_mem: Sequence[float],
                     util: Sequence[float], isolated: Mapping[tuple[str, JobSpec], IsolatedProfile],
                     has_memory: bool, has_util: bool) -> list[GroupPrediction]:
    """The network's heads as :class:`GroupPrediction` s: ``speeds`` one per member of every group in order,
    memory as the log ratio to the summed isolated memory, utilisation as a share (numpy and torch roads
    alike)."""
    out, k = [], 0
    for i, g in enumerate(groups):
        base = summed_isolated_memory_mib(g, isolated)
        mem = base * math.exp(float(log_mem[i])) if has_memory and base else None
        out.append(GroupPrediction(tuple(speeds[k:k + len(g.jobs)]), mem,
                                   100.0 * float(util[i]) if has_util else None))
        k += len(g.jobs)
    return out


@cache
def shipped_eggat() -> NumpyEggat:
    """The packaged network (trained on Gavel's MIT-licensed pairs), read without torch."""
    return NumpyEggat.load(str(resources.files("dltsched.predictors.colocation").joinpath(SHIPPED_EGGAT)))
