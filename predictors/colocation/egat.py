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
priors are 0 and 50%. The graph is built torch-free (:func:`.egat_numpy.group_graph_arrays`); a trained
network runs without torch in :class:`.egat_numpy.NumpyEggat`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GATv2Conv
from torch_geometric.utils import scatter

from dltsched.predictors.colocation.egat_numpy import (
    EDGE_FEATURES,
    GLOBAL_FEATURES,
    IN_FEATURES,
    LOG_MAX_SPEED,
    group_graph_arrays,
)
from dltsched.predictors.colocation.features import Group
from dltsched.predictors.colocation.samples import IsolatedProfile, JobSpec


def group_graph(group: Group, isolated: Mapping[tuple[str, JobSpec], IsolatedProfile]) -> Data:
    """The PyG graph of one co-located group (see module docstring), from
    :func:`.egat_numpy.group_graph_arrays` (the graph the numpy forward pass runs on)."""
    g = group_graph_arrays(group, isolated)
    return Data(
        x=torch.tensor(g.x, dtype=torch.float32),
        edge_index=torch.tensor(np.stack((g.src, g.dst)), dtype=torch.long),
        edge_attr=torch.tensor(g.edge_attr, dtype=torch.float32),
        hub_mask=torch.tensor(g.hub_mask),
        job_of=torch.tensor(g.job_of, dtype=torch.long),
        glob=torch.tensor(g.glob[None, :], dtype=torch.float32),
        speed_prior=torch.tensor(g.speed_prior, dtype=torch.float32),
        util_logit_prior=torch.tensor([g.util_logit_prior], dtype=torch.float32),
        num_jobs=g.num_jobs,
    )


class GatedGatLayer(nn.Module):
    """GATv2 attention with edge features; the message is gated into the residual stream."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.conv = GATv2Conv(hidden, hidden // heads, heads=heads, edge_dim=EDGE_FEATURES, dropout=dropout)
        self.gate = nn.Linear(2 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """One gated message-passing step: attention messages mixed into the node states through a learned
        gate.

        Parameters
        ----------
        h
            Node states, one row a node.
        edge_index
            Source and target node of each edge (2 x edges).
        edge_attr
            Edge features, one row an edge.

        Returns
        -------
        torch.Tensor
            The new node states (normalised residual update).
        """
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
        z = self.speed_head(torch.cat([hub, job_mean, others, glob[graph_of_job], prior[:, None]],
                                      -1)).squeeze(-1)
        log_speed = (prior + z).clamp_max(LOG_MAX_SPEED)
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
    """One batch of group graphs, remembering how many jobs each graph holds.

    Parameters
    ----------
    graphs
        The graphs.

    Returns
    -------
    Batch
        The batched graphs with ``num_jobs`` per graph.
    """
    batch = Batch.from_data_list(list(graphs))
    batch.num_jobs = torch.tensor([g.num_jobs for g in graphs], dtype=torch.long)
    return batch
