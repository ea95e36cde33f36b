"""Small random instances for engine tests (Gavel's models and batch sizes; mixed GPU types)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest

from dltsched.engine.app.registry import predictors as predictor_bundle
from dltsched.engine.domain.model import Cluster, Instance, Job, Node
from dltsched.engine.domain.predictors import Predictors, StepTimePredictor

GAVEL_JOBS = (("resnet18", 128), ("resnet50", 64), ("transformer", 128), ("lstm_lm", 20),
              ("recoder", 1024), ("a3c", 4), ("cyclegan", 1), ("resnet18", 32))


def small_instance(seed: int, num_jobs: int = 12, gpus_per_node: int = 2,
                   mean_gap_s: float = 60.0) -> Instance:
    """A seeded instance: 4 nodes (2 v100, p100, k80), Poisson arrivals ``mean_gap_s`` apart on average,
    mixed sizes and models."""
    rng = random.Random(seed)
    cluster = Cluster((Node("v0", "v100", gpus_per_node), Node("v1", "v100", gpus_per_node),
                       Node("p0", "p100", gpus_per_node), Node("k0", "k80", gpus_per_node)))
    jobs = []
    t = 0.0
    for i in range(num_jobs):
        t += rng.expovariate(1 / mean_gap_s)
        model, batch = rng.choice(GAVEL_JOBS)
        jobs.append(Job(f"j{i}", model, batch, rng.choice([50, 500, 3000]),
                        num_gpus=rng.choice([1, 1, 1, 2, 4]), arrival_time_s=round(t, 3),
                        freeze_allowed=(free := rng.random() < 0.3), accuracy_budget=0.1 if free else 0.0))
    return Instance(f"small-{seed}", cluster, tuple(jobs))


@pytest.fixture(scope="session", name="small_instance")
def small_instance_fixture():
    return small_instance


@pytest.fixture(scope="session")
def analytic():
    return predictor_bundle("analytic")


@dataclass(frozen=True)
class UnderMemory:
    """Memory predictions a third of the truth for ResNet-50 and Transformer jobs (a property of the job's
    kind, not of its id: Gandiva judges pairings once per kinds of jobs)."""

    base: StepTimePredictor

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        return self.base.step_time_s(job, gpu_type, num_gpus, freeze_level=freeze_level, num_nodes=num_nodes)

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        exact = self.base.memory_mib(job, gpu_type, freeze_level=freeze_level)
        return exact / 3 if job.model in ("resnet50", "transformer") else exact


def memory_trap(predictors: Predictors, inst: Instance) -> tuple[Predictors, Instance]:
    """Predictors that under-predict memory (:class:`UnderMemory`) and ``inst`` with every fifth job too large
    for a K80 (ResNet-50 at batch 128, 13.6 GB): policies try jobs where they do not fit, which crash out of
    memory (``memory="oom"``) and no longer ask for that GPU type."""
    jobs = tuple(replace(j, model="resnet50", batch_size=128) if int(j.id[1:]) % 5 == 0 else j
                 for j in inst.jobs)
    return replace(predictors, step_time=UnderMemory(predictors.step_time)), replace(inst, jobs=jobs)


@pytest.fixture(scope="session", name="memory_trap")
def memory_trap_fixture():
    return memory_trap
