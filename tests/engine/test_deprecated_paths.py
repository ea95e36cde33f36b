"""Public paths from before the layered layout keep working for one release, each with a DeprecationWarning
that names the new path; the new paths warn about nothing.

The first test is a Gavel-style policy written against the earlier embedding API: its imports as they were,
one round solved with them.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

OLD_MODULES = {
    "dltsched.engine.api": "dltsched.engine.app.api",
    "dltsched.engine.predict": "dltsched.engine.domain.predictors",
    "dltsched.engine.errors": "dltsched.engine.domain.errors",
    "dltsched.engine.simulator": "dltsched.engine.sim.simulator",
}

EARLIER_GAVEL_POLICY = """
import warnings
warnings.simplefilter("always", DeprecationWarning)
caught = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from dltsched.engine.api import SolveConfig, solve_round
    from dltsched.engine.domain import MEASURED_ONLY, Cluster, ClusterState, Job, JobState
    from dltsched.engine.predict import Predictors

    class EarlierGavelPolicy:
        name = "MinTotalDuration_Packing_dltsched"

        def get_allocation(self, throughputs, cluster_spec):
            cluster = Cluster.homogeneous("v100", 1, cluster_spec["v100"])
            jobs = tuple(JobState(Job(str(j), MEASURED_ONLY, 32, 1000), 1000) for j in throughputs)
            steps = {str(j): {"step_time_s": {"v100": 1.0 / t["v100"]}} for j, t in throughputs.items()}
            plan = solve_round(ClusterState(0.0, cluster, jobs), SolveConfig(time_limit_s=5.0),
                               measurements={"jobs": steps, "unknown_memory": "trust"})
            running = {a.job_id for a in plan.assignments}
            return {j: {"v100": 1.0 if str(j) in running else 0.0} for j in throughputs}

    allocation = EarlierGavelPolicy().get_allocation({0: {"v100": 4.0}, 1: {"v100": 2.0}}, {"v100": 2})
assert Predictors.__module__ == "dltsched.engine.domain.predictors"
assert allocation == {0: {"v100": 1.0}, 1: {"v100": 1.0}}, allocation
messages = sorted({str(w.message).split(" is deprecated")[0] for w in caught
                   if issubclass(w.category, DeprecationWarning) and "dltsched" in str(w.message)})
print("\\n".join(messages))
"""


def test_earlier_gavel_policy_imports_work_with_deprecation_warnings() -> None:
    """A fresh interpreter, so every module-level warning fires; the policy's allocation runs both jobs."""
    done = subprocess.run([sys.executable, "-c", EARLIER_GAVEL_POLICY], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    warned = set(done.stdout.split("\n"))
    assert {"dltsched.engine.api", "dltsched.engine.predict", "SolveConfig"} <= warned
    assert {"dltsched.engine.domain.Cluster", "dltsched.engine.domain.ClusterState",
            "dltsched.engine.domain.Job", "dltsched.engine.domain.JobState",
            "dltsched.engine.domain.MEASURED_ONLY"} <= warned


@pytest.mark.parametrize("old,new", sorted(OLD_MODULES.items()))
def test_old_module_warns_and_gives_the_same_objects(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated.*{new.replace('.', '[.]')}"):
        module = importlib.import_module(old)
    current = importlib.import_module(new)
    for name in module.__all__:
        assert getattr(module, name) is getattr(current, name), f"{old}.{name}"


def test_domain_types_from_the_package_warn_and_are_the_model_types() -> None:
    import dltsched.engine.domain as domain
    from dltsched.engine.domain import model

    for name in ("Job", "Cluster", "ClusterState", "Plan", "PlanStatus", "MEASURED_ONLY"):
        with pytest.warns(DeprecationWarning, match=rf"dltsched.engine.domain.{name} is deprecated"):
            value = getattr(domain, name)
        assert value is getattr(model, name)
    with pytest.raises(AttributeError):
        domain.NoSuchType  # noqa: B018


def test_new_paths_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from dltsched.engine import RoundOptions, solve_round  # noqa: F401
        from dltsched.engine.domain.errors import ValidationError  # noqa: F401
        from dltsched.engine.domain.model import Cluster, Job  # noqa: F401
        from dltsched.engine.domain.predictors import Predictors  # noqa: F401


def test_version_is_the_packages() -> None:
    from importlib.metadata import version

    import dltsched.engine

    assert dltsched.engine.__version__ == version("dltsched")
    assert tuple(int(x) for x in dltsched.engine.__version__.split(".")[:2]) >= (0, 2)
