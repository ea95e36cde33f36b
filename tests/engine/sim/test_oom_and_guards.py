"""Out of memory as in a real cluster (crash, re-queue, learn the measured peak), and the guards that stop a
simulation which cannot finish (no progress; simulated time beyond ``max_time_s``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from dltsched.engine.app.registry import make_policy, policy_names
from dltsched.engine.domain.errors import InvalidPlanError, SimulationStalledError, ValidationError
from dltsched.engine.domain.model import Cluster, ClusterState, Instance, Job, Node, Plan
from dltsched.engine.domain.predictors import MemoryObservations, learned_memory_mib, observing_memory
from dltsched.engine.sim.simulator import TEN_YEARS_S, SimulationConfig, Simulator, simulate
from dltsched.engine.sim.truth import MeasuredTruth

TRUTH = MeasuredTruth(use_measurements=False)

#: one V100 (16 GiB). ResNet-50 at batch 128 needs 13.6 GB, the Transformer 3.5 GB: together they do not fit,
#: but predictions a third of the truth (``ThirdOfMemory``) say 4.5 + 1.2 GB, so packing policies pair them
PAIR = Instance("pair", Cluster((Node("v0", "v100", 1),)),
                (Job("big", "resnet50", 128, 300), Job("small", "transformer", 128, 300, arrival_time_s=1.0)))


@dataclass
class Watch:
    """Wraps a policy; records, per round, the memory it would estimate for ``small`` on the V100."""

    inner: object
    seen: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name  # type: ignore[attr-defined,no-any-return]

    @property
    def round_interval_s(self) -> float | None:
        return self.inner.round_interval_s  # type: ignore[attr-defined,no-any-return]

    def schedule(self, state: ClusterState) -> Plan:
        for s in state.jobs:
            if s.job.id == "small":
                predicted = self.inner.predictors.step_time.memory_mib(s.job, "v100")  # type: ignore[attr-defined]
                self.seen.append(learned_memory_mib(predicted, s.job, "v100"))
        return self.inner.schedule(state)  # type: ignore[attr-defined,no-any-return]


@dataclass(frozen=True)
class ThirdOfMemory:
    """Step times as given; memory a third of the prediction."""

    base: object

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int | None = None, *,
                    freeze_level: int = 0, num_nodes: int = 1) -> float:
        return self.base.step_time_s(job, gpu_type, num_gpus,
                                     freeze_level=freeze_level,  # type: ignore[attr-defined]
                                     num_nodes=num_nodes)

    def memory_mib(self, job: Job, gpu_type: str, *, freeze_level: int = 0) -> float:
        return self.base.memory_mib(job, gpu_type,
                                    freeze_level=freeze_level) / 3  # type: ignore[attr-defined]


@pytest.fixture(name="under")
def under_fixture(analytic):
    return replace(analytic, step_time=ThirdOfMemory(analytic.step_time))


@pytest.mark.parametrize("name", ["gandiva", "isacpp"])
def test_an_under_predicted_job_crashes_once_is_requeued_learns_and_finishes(name, under):
    """The packing policy pairs 'small' with 'big' (predicted 5.7 GB of 16): it crashes out of memory (once),
    goes back to the queue, and from then on the policy's estimate of its memory is the measured 3.5 GB, so it
    waits for the GPU instead of crashing again; both finish, and ``num_oom`` counts the one crash."""
    policy = Watch(make_policy(name, predictors=under))
    result = simulate(PAIR, policy, truth=TRUTH)
    assert result.num_oom == 1
    assert result.to_dict()["num_oom"] == 1
    assert result.num_jobs_finished == 2
    finish = {r.job_id: r for r in result.records}
    assert finish["small"].first_start_s >= finish["big"].finish_s  # re-queued: ran after 'big', alone
    truth_small = TRUTH.memory_mib(PAIR.jobs[1], "v100")
    assert policy.seen[0] < truth_small / 2  # before the crash: the under-prediction
    assert policy.seen[-1] == truth_small  # after it: the measured peak
    # the strict check refuses the same plan instead
    with pytest.raises(InvalidPlanError, match="memory"):
        simulate(PAIR, make_policy(name, predictors=under), truth=TRUTH,
                 config=SimulationConfig(memory="reject"))


def test_measured_memory_is_per_run_and_per_job_kind():
    obs = MemoryObservations()
    job = Job("a", "resnet50", 128, 10)
    same_kind = Job("b", "resnet50", 128, 99, arrival_time_s=5.0)
    other = Job("c", "resnet50", 64, 10)
    assert learned_memory_mib(100.0, job, "v100") == 100.0  # outside a run: the prediction
    with observing_memory(obs):
        assert obs.record(job, "v100", 0, 500.0)
        assert not obs.record(job, "v100", 0, 400.0)  # nothing new
        assert learned_memory_mib(100.0, same_kind, "v100") == 500.0
        assert learned_memory_mib(900.0, job, "v100") == 900.0  # never lowered
        assert learned_memory_mib(100.0, other, "v100") == 100.0
        assert learned_memory_mib(100.0, job, "k80") == 100.0
        assert learned_memory_mib(100.0, job, "v100", freeze_level=1) == 100.0
    assert learned_memory_mib(100.0, job, "v100") == 100.0
    assert MemoryObservations.from_list(obs.to_list()).to_list() == obs.to_list()


def test_every_policy_finishes_when_memory_is_under_predicted(analytic, memory_trap, small_instance):
    """A third of the true memory predicted for two models, and jobs too large for a K80: every registered
    policy finishes every job, with each crash teaching something (a blind repeat would raise)."""
    preds, inst = memory_trap(analytic, small_instance(3, num_jobs=16, mean_gap_s=20.0))
    crashes = {}
    for name in policy_names():
        options = {"time_limit_s": 1.0} if name.startswith("optimizing") else {}
        result = simulate(inst, make_policy(name, predictors=preds, **options), truth=TRUTH)
        assert result.num_jobs_finished == len(inst.jobs), name
        crashes[name] = result.num_oom
    assert sum(crashes.values()) > 0, f"no policy crashed: the test shows nothing ({crashes})"


def test_a_policy_blind_to_measured_memory_is_stopped(under):
    """A policy that keeps packing where the job crashed (it ignores what was measured) is stopped with an
    error naming it, not left crashing forever."""

    @dataclass
    class Blind:
        name: str = "blind"
        round_interval_s: float | None = 1.0

        def schedule(self, state: ClusterState) -> Plan:
            from dltsched.engine.domain.model import Assignment

            return Plan(tuple(Assignment(s.job.id, (0,)) for s in state.jobs))

    inst = replace(PAIR, jobs=(replace(PAIR.jobs[0], total_iterations=1e6), PAIR.jobs[1]))
    with pytest.raises(InvalidPlanError,
                       match=r"policy 'blind' placed job 'small'.*crashed out of memory 100 times"):
        simulate(inst, Blind(), truth=TRUTH)


# -- guards ------------------------------------------------------------------------------------------------


@dataclass
class Idle:
    """Runs every job on GPU 0 and asks for a round every 0 s: the clock never moves."""

    name: str = "idle"
    round_interval_s: float | None = 0.0

    def schedule(self, state: ClusterState) -> Plan:
        from dltsched.engine.domain.model import Assignment

        return Plan(tuple(Assignment(s.job.id, (0,)) for s in state.jobs))


def test_a_loop_that_cannot_advance_the_clock_raises_naming_the_policy_and_state():
    inst = Instance("stuck", Cluster((Node("v0", "v100", 1),)), (Job("a", "resnet18", 32, 100),))
    with pytest.raises(SimulationStalledError,
                       match=r"policy 'idle': no progress in 1000 iterations.*clock 0 s with 0 "
                             r"job\(s\) queued, 1 "
                             r"running"):
        Simulator(inst, Idle(), TRUTH).run()
    with pytest.raises(SimulationStalledError, match="no progress in 5 iterations"):
        Simulator(inst, Idle(), TRUTH, SimulationConfig(max_stalled_iterations=5)).run()
    # a clock that creeps (rounds 0.1 microsecond apart) is no progress either
    with pytest.raises(SimulationStalledError, match="policy 'idle': no progress in 1000 iterations"):
        Simulator(inst, Idle(round_interval_s=1e-7), TRUTH).run()


def test_optimizing_policy_with_a_zero_round_interval_is_stopped(repo_root, analytic):
    from dltsched.engine.app.api import load_instance_file, optimizing_policy

    inst = load_instance_file(repo_root / "instances/examples/tiny-4jobs-2gpus.json")
    with pytest.raises(ValidationError, match="round_interval_s"):  # the option check refuses it first
        make_policy("optimizing", round_interval_s=0.0, predictors=analytic)
    # the factory itself: the guard is the safety net
    policy = optimizing_policy(analytic, round_interval_s=0.0)
    with pytest.raises(SimulationStalledError, match=r"policy 'optimizing': no progress.*running"):
        simulate(inst, policy, truth=TRUTH)


def test_work_beyond_the_simulated_time_bound_is_a_clear_error():
    cluster = Cluster((Node("v0", "v100", 1),))
    huge = Instance("huge", cluster, (Job("a", "resnet18", 32, 1e12),))
    for name in ("fifo", "tiresias"):
        with pytest.raises(SimulationStalledError,
                           match=r"job 'a': .* beyond max_time_s=3.156e\+08 s .*10 years"):
            simulate(huge, make_policy(name), truth=TRUTH)
    # queueing can take a run past the bound too: two jobs, each within it alone, one after the other
    two = Instance("two", cluster, tuple(Job(f"j{i}", "resnet18", 32, 1) for i in range(2)))
    alone_s = TRUTH.step_time_s(two.jobs[0], "v100", 1)
    cfg = SimulationConfig(max_time_s=1.5 * alone_s)
    with pytest.raises(SimulationStalledError, match=r"policy 'fifo': simulated time would pass max_time_s"):
        simulate(two, make_policy("fifo"), truth=TRUTH, config=cfg)
    assert simulate(two, make_policy("fifo"), truth=TRUTH).num_jobs_finished == 2
    assert SimulationConfig().max_time_s == TEN_YEARS_S
