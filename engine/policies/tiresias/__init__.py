"""Tiresias: the policy and its attained-service index."""
