"""E-GGAT: an edge-aware gated graph attention network over the co-located jobs' operator graphs.

One group becomes one graph: each job contributes its coarsened operator graph (super-nodes with
op-class, FLOPs, bytes and layer-position features, plus the job's hyper-parameters and isolated
profile broadcast onto them) and a *hub* node. Edges: operator data flow (both directions), hub <->
its super-nodes, and cross-job edges (every super-node -> the other jobs' hubs, hub <-> hub) through
which the network sees the contention. Edge features (tensor MiB, kind) enter the attention
(``GATv2Conv(edge_dim=...)``); each layer's message is gated into the residual stream.
GPU features and the group size are global features fed to the heads: per-job log speed, group
memory (log ratio to the summed isolated memory) and GPU utilisation. The speed and utilisation
heads are residual over parameter-free priors where isolated utilisation is known (time slicing,
``log min(1, 100 / total isolated util)``, and the union of the isolated busy periods); elsewhere the
priors are 0 and 50%.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GATv2Conv
from torch_geometric.utils import scatter

from dltsched.predictors.colocation.features import (
    GPU_FEATURES,
    JOB_FEATURES,
    PAIR_FEATURES,
    Group,
    contention_log_speeds,
    gpu_features,
    job_features,
    pair_features,
    union_util,
)
from dltsched.predictors.colocation.graphs import NODE_FEATURES, coarse_graph, node_features
from dltsched.predictors.colocation.samples import IsolatedProfile, JobSpec

IN_FEATURES = NODE_FEATURES + len(JOB_FEATURES) + len(PAIR_FEATURES) + 1
EDGE_FEATURES = 4  # log1p(tensor MiB), flow, hub, cross-job
GLOBAL_FEATURES = len(GPU_FEATURES) + 1
_LOG_MAX_SPEED = math.log(2.0)  # co-located speeds stay below 2x isolated
_UTIL_CLAMP = 0.02  # priors kept inside (2%, 98%) before the logit


def _job_nodes(gpu: str, job: JobSpec,
               isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> tuple[list[list[float]], list[tuple[int, int, float]]]:
    graph = coarse_graph(job.model, job.dataset)
    jf = [*job_features(job, isolated.get((gpu, job))), *pair_features(gpu, job, isolated)]
    rows = [[*node_features(n, job.batch_size, job.amp), *jf, 0.0] for n in graph.nodes]
    rows.append([0.0] * NODE_FEATURES + jf + [1.0])  # hub
    return rows, list(graph.edges)


def group_graph(group: Group, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> Data:
    """The PyG graph of one co-located group (see module docstring)."""
    x: list[list[float]] = []
    src: list[int] = []
    dst: list[int] = []
    attr: list[list[float]] = []
    hubs: list[int] = []
    members: list[range] = []

    def link(s: int, d: int, feats: list[float]) -> None:
        src.append(s)
        dst.append(d)
        attr.append(feats)

    for job in group.jobs:
        rows, edges = _job_nodes(group.gpu, job, isolated)
        base = len(x)
        x.extend(rows)
        hub = base + len(rows) - 1
        hubs.append(hub)
        members.append(range(base, hub))
        for s, d, mib in edges:
            w = math.log1p(mib)
            link(base + s, base + d, [w, 1.0, 0.0, 0.0])
            link(base + d, base + s, [w, 1.0, 0.0, 0.0])
        for n in range(base, hub):
            link(n, hub, [0.0, 0.0, 1.0, 0.0])
            link(hub, n, [0.0, 0.0, 1.0, 0.0])
    for i, hub in enumerate(hubs):
        for j, other in enumerate(hubs):
            if i != j:
                link(hub, other, [0.0, 0.0, 0.0, 1.0])
                for n in members[i]:
                    link(n, other, [0.0, 0.0, 0.0, 1.0])
    job_of = [0] * len(x)
    for i, hub in enumerate(hubs):
        for n in (*members[i], hub):
            job_of[n] = i
    util = union_util(group, isolated)
    util_prior = min(1.0 - _UTIL_CLAMP, max(_UTIL_CLAMP, util / 100.0)) if util is not None else 0.5
    return Data(
        x=torch.tensor(x, dtype=torch.float32),
        edge_index=torch.tensor([src, dst], dtype=torch.long),
        edge_attr=torch.tensor(attr, dtype=torch.float32),
        hub_mask=torch.tensor([n in hubs for n in range(len(x))]),
        job_of=torch.tensor(job_of, dtype=torch.long),
        glob=torch.tensor([[*gpu_features(group.gpu), float(len(group.jobs))]], dtype=torch.float32),
        speed_prior=torch.tensor(contention_log_speeds(group, isolated), dtype=torch.float32),
        util_logit_prior=torch.tensor([math.log(util_prior / (1.0 - util_prior))], dtype=torch.float32),
        num_jobs=len(group.jobs),
    )


class GatedGatLayer(nn.Module):
    """GATv2 attention with edge features; the message is gated into the residual stream."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.conv = GATv2Conv(hidden, hidden // heads, heads=heads, edge_dim=EDGE_FEATURES, dropout=dropout)
        self.gate = nn.Linear(2 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        m = self.conv(h, edge_index, edge_attr)
        g = torch.sigmoid(self.gate(torch.cat([h, m], dim=-1)))
        return self.norm(h + g * m)


class EGGAT(nn.Module):
    """Per-job speed, group memory and GPU utilisation from a group graph (see module docstring)."""

    def __init__(self, hidden: int = 64, heads: int = 4, num_layers: int = 3, dropout: float = 0.0) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden={hidden} not understood; must be a multiple of heads={heads}")
        self.register_buffer("x_mean", torch.zeros(IN_FEATURES))
        self.register_buffer("x_std", torch.ones(IN_FEATURES))
        self.register_buffer("g_mean", torch.zeros(GLOBAL_FEATURES))
        self.register_buffer("g_std", torch.ones(GLOBAL_FEATURES))
        self.embed = nn.Linear(IN_FEATURES, hidden)
        self.layers = nn.ModuleList(GatedGatLayer(hidden, heads, dropout) for _ in range(num_layers))
        self.speed_head = _mlp(3 * hidden + GLOBAL_FEATURES + 1, hidden, 1)
        self.group_head = _mlp(2 * hidden + GLOBAL_FEATURES, hidden, 2)

    def set_normalization(self, x: torch.Tensor, glob: torch.Tensor) -> None:
        """Standardize inputs with training-set statistics (stored with the weights)."""
        self.x_mean.copy_(x.mean(0))
        self.x_std.copy_(x.std(0).clamp_min(0.1))
        self.g_mean.copy_(glob.mean(0))
        self.g_std.copy_(glob.std(0).clamp_min(0.5))  # one training GPU must not blow up unseen ones

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log speed per job, log memory ratio per group, GPU util fraction per group); speed and
        util are residual over the graphs' ``speed_prior`` and ``util_logit_prior``."""
        h = self.embed((batch.x - self.x_mean) / self.x_std)
        for layer in self.layers:
            h = layer(h, batch.edge_index, batch.edge_attr)
        glob = (batch.glob - self.g_mean) / self.g_std
        # job ids global to the batch: offset each graph's local job index
        offsets = torch.cumsum(batch.num_jobs, 0) - batch.num_jobs
        job = offsets[batch.batch] + batch.job_of
        n_jobs = int(batch.num_jobs.sum())
        job_mean = scatter(h, job, 0, dim_size=n_jobs, reduce="mean")
        hub = torch.zeros_like(job_mean).index_copy(0, job[batch.hub_mask], h[batch.hub_mask])
        graph_of_job = torch.repeat_interleave(torch.arange(len(batch.num_jobs)), batch.num_jobs)
        group_sum = scatter(hub, graph_of_job, 0, dim_size=len(batch.num_jobs), reduce="sum")
        others = group_sum[graph_of_job] - hub
        prior = batch.speed_prior
        z = self.speed_head(torch.cat([hub, job_mean, others, glob[graph_of_job], prior[:, None]], -1)).squeeze(-1)
        log_speed = (prior + z).clamp_max(_LOG_MAX_SPEED)
        group_mean = scatter(h, batch.batch, 0, dim_size=len(batch.num_jobs), reduce="mean")
        out = self.group_head(torch.cat([group_sum, group_mean, glob], -1))
        return log_speed, out[:, 0], torch.sigmoid(batch.util_logit_prior + out[:, 1])

    def init_output_bias(self, speed_residual: float, log_memory_ratio: float) -> None:
        """Start the heads at the training set's median residuals (short trainings converge sooner)."""
        with torch.no_grad():
            self.speed_head[-1].bias.fill_(speed_residual)
            self.group_head[-1].bias[0] = log_memory_ratio


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.GELU(), nn.Linear(hidden, n_out))


def collate(graphs: Sequence[Data]) -> Batch:
    batch = Batch.from_data_list(list(graphs))
    batch.num_jobs = torch.tensor([g.num_jobs for g in graphs], dtype=torch.long)
    return batch
