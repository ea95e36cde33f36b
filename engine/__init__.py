"""dltsched.engine: the domain model, simulator, policies, metrics, CLI and the embedding API."""

from dltsched.engine.api import SolveConfig, plan_to_dict, simulate_instance, solve_round

__all__ = ["SolveConfig", "plan_to_dict", "simulate_instance", "solve_round"]
