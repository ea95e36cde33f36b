"""Scheduling policies, one module per policy; they see :class:`~dltsched.engine.domain.model.ClusterState` snapshots and predictions only."""
