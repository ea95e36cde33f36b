"""Tiresias: the policy (policy), its attained-service index (index) and what the index is made of
(queues)."""
