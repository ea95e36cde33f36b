"""Checkpoints that cost little: by default a run writes its checkpoint as often as a share of its wall-clock
time (3%) allows, never more, and resumes from such a checkpoint on the same trajectory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dltsched.engine.app.registry import make_policy
from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.sim import checkpoint as ckpt
from dltsched.engine.sim.checkpoint import DEFAULT_MAX_OVERHEAD, CheckpointStore
from dltsched.engine.sim.faults import FaultConfig
from dltsched.engine.sim.simulator import SimulationConfig, Simulator
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.instances.schema import load_instance

TRUTH = MeasuredTruth(use_measurements=False)
MEDIUM = Path(__file__).parents[3] / "instances" / "examples" / "medium-200jobs-64gpus.json"


class Crash(Exception):
    pass


def test_default_writes_take_a_bounded_share_of_the_run(analytic: Any, tmp_path: Path,
                                                        monkeypatch: Any) -> None:
    """Every write but the last fits in the share of the wall-clock time before it (the rule); the run saves,
    and its result is the one without checkpoints. (The store's own accounting against the share, which
    counts gathering the state too, is checked on exact costs below: on a loaded machine one slow gathering
    can rightly take a last write over it.)"""
    costs: list[float] = []
    write = ckpt.write_checkpoint

    def timed(*args: Any) -> None:
        t = time.perf_counter()
        write(*args)
        costs.append(time.perf_counter() - t)

    monkeypatch.setattr(ckpt, "write_checkpoint", timed)
    # the rule from the first write on: without this guess of the first write's cost, a run that ends within a
    # few tens of milliseconds (a fast, quiet machine) may rightly write nothing
    monkeypatch.setattr(ckpt, "FIRST_WRITE_GUESS_S", 0.0)
    inst = load_instance(MEDIUM)
    plain = Simulator(inst, make_policy("tiresias", predictors=analytic), TRUTH).run()
    share = 0.2  # the rule at any share; the default (3%) lets this short run write once or not at all
    store = CheckpointStore(tmp_path / "c.json", max_overhead=share)
    start = time.perf_counter()
    saved = Simulator(inst, make_policy("tiresias", predictors=analytic), TRUTH, store=store).run()
    elapsed = time.perf_counter() - start
    assert store.writes == len(costs) >= 1
    assert sum(costs) - max(costs) <= share * elapsed, (costs, elapsed)
    assert CheckpointStore(tmp_path / "d.json").max_overhead == DEFAULT_MAX_OVERHEAD == 0.03
    assert saved.records == plain.records


class _Clock:
    """The checkpoint module's clock, moved only by the test: each round takes one second, each write what
    the test says; so the rule is checked on exact costs, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.mark.parametrize("write_s,every_round", [(0.001, True), (0.2, False)])
def test_cheap_writes_come_every_round_and_costly_ones_less(write_s: float, every_round: bool, analytic: Any,
                                                            small_instance: Any, tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    clock = _Clock()
    monkeypatch.setattr(ckpt, "time", clock)
    written: list[int] = []

    def write(_path: Any, _fp: Any, state: dict[str, Any]) -> None:
        clock.now += write_s
        written.append(state["rounds"])

    def round_ends(_t: float, _finished: int) -> None:
        clock.now += 1.0

    monkeypatch.setattr(ckpt, "write_checkpoint", write)
    store = CheckpointStore(tmp_path / "c.json")  # the default share, 3% of the run
    result = Simulator(small_instance(3, num_jobs=15), make_policy("fifo", predictors=analytic), TRUTH,
                       on_round=round_ends, store=store).run()
    assert result.num_rounds >= 20
    assert store.writes == len(written) and store.write_s == pytest.approx(write_s * len(written))
    if every_round:  # 1 ms per 1 s round: every round after the first, once the first second has passed
        assert written == list(range(2, result.num_rounds + 1))
    else:  # 200 ms per write within 3%: one round in about seven
        assert 1 <= len(written) < result.num_rounds / 4
        assert store.write_s <= DEFAULT_MAX_OVERHEAD * clock.now


def test_resume_from_a_time_based_checkpoint_is_the_same_run(analytic: Any, small_instance: Any,
                                                               tmp_path: Path) -> None:
    inst = small_instance(5, num_jobs=30, mean_gap_s=20.0)
    cfg = SimulationConfig(seed=2,
                           faults=FaultConfig(mtbf_s=3 * 3600.0, mttr_s=600.0, checkpoint_interval_s=300.0))
    plain = Simulator(inst, make_policy("tiresias", predictors=analytic), TRUTH, cfg).run()
    seen = {"n": 0}

    def crash(_t: float, _finished: int) -> None:
        seen["n"] += 1
        if seen["n"] == plain.num_rounds // 2:
            raise Crash

    path = tmp_path / "c.json"
    with pytest.raises(Crash):
        Simulator(inst, make_policy("tiresias", predictors=analytic), TRUTH, cfg, on_round=crash,
                  store=CheckpointStore(path, max_overhead=1.0)).run()
    resumed = Simulator(inst, make_policy("tiresias", predictors=analytic), TRUTH, cfg,
                        store=CheckpointStore(path)).run(resume=True)
    assert resumed.records == plain.records
    assert resumed.num_rounds == plain.num_rounds


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, float("nan"), True])
def test_the_overhead_share_is_checked(bad: Any, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="checkpoint_max_overhead"):
        CheckpointStore(tmp_path / "c.json", max_overhead=bad)
