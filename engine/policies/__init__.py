"""Scheduling policies, one module per policy.

They see :class:`~dltsched.engine.domain.model.ClusterState` snapshots and predictions only, never the
simulator or its ground truth.
"""
