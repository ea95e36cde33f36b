"""The guard against starving a job, without a Slurm: which job starves, the nodes reserved for it (from the
running jobs' reported progress), backfill around the reservation, and a whole round with it."""

from __future__ import annotations

import math

from dltsched.engine.app.adapters.slurm_parse import JobSpec, SlurmNode
from dltsched.engine.app.adapters.slurm_reserve import Reservation, backfill, reserve, starving_job
from dltsched.engine.app.adapters.slurm_round import Placement, RoundConfig, Snapshot, decide

NOW = 10_000.0
INF = math.inf


def test_the_job_that_waited_longest_for_its_run_time_starves() -> None:
    submit = {"a": NOW - 300, "b": NOW - 100, "c": NOW - 50}
    run = {"a": 200.0, "b": 20.0, "c": 100.0}
    assert starving_job(["a", "b", "c"], NOW, submit, run, factor=1.0) == "b"  # 5x its run; a 1.5x, c 0.5x
    assert starving_job(["a", "c"], NOW, submit, run, factor=2.0) is None
    assert starving_job(["a", "b"], NOW, submit, run, factor=0.0) is None  # off


def test_reservation_takes_the_nodes_that_free_up_first() -> None:
    """n1: GPU 0 busy for 100 s, the rest free; n2: GPUs 0-1 busy for 10 s, 2-3 free; n3 is another type.
    A 4-GPU job is kept n2 (free in 10 s), its free GPUs 2-3 withheld now; a 3-GPU job starts on n1 now."""
    free_at = {"n1": [NOW + 100, NOW, NOW, NOW], "n2": [NOW + 10, NOW + 10, NOW, NOW], "n3": [NOW] * 8}
    types = {"n1": "v100", "n2": "v100", "n3": "a100"}
    wide = reserve("w", NOW, free_at, types, 4, 1, frozenset({"n1", "n2"}))
    assert wide == Reservation("w", {"n2": (0, 1, 2, 3)}, NOW + 10, {"n2": (2, 3)})
    assert not wide.starts_now(NOW)
    three = reserve("t", NOW, free_at, types, 3, 1, frozenset({"n1", "n2"}))
    assert three is not None and three.starts_now(NOW) and three.per_node == {"n1": (1, 2, 3)}
    assert reserve("g", NOW, free_at, types, 4, 3, None) is None  # no three nodes of one type
    gang = reserve("g", NOW, free_at, types, 4, 2, frozenset({"n1", "n2"}))
    assert gang is not None and gang.start_s == NOW + 100 and set(gang.per_node) == {"n1", "n2"}
    whole = reserve("x", NOW, free_at, types, 1, 1, frozenset({"n1", "n2"}), whole=True)
    assert whole is not None and whole.per_node == {"n2": (2,)} and whole.withheld == {"n2": (2, 3)}
    assert reserve("f", NOW, {"n1": [INF] * 4}, {"n1": "v100"}, 1, 1, None) is None  # never free


def test_backfill_only_jobs_that_end_before_the_reservation() -> None:
    kept = Reservation("w", {"n2": (0, 1, 2, 3)}, NOW + 30, {"n2": (2, 3)})
    run = {"s": 5.0, "m": 20.0, "l": 500.0, "g": 1.0}
    gpus = {"s": 1, "m": 2, "l": 1, "g": 1}
    nodes = {"g": 2}
    placed = backfill(kept, NOW, ["l", "m", "s", "g"], run, gpus, nodes, {"s": None, "m": None, "l": None})
    assert placed == {"s": {"n2": (2,)}}  # m needs 2 GPUs, one is left; l is too long; g spans two nodes
    assert backfill(kept, NOW, ["s"], run, gpus, {}, {"s": frozenset({"n1"})}) == {}  # not its node


def _snap(queued_wait_s: float) -> Snapshot:
    """Two 4-GPU nodes; n1 runs a 1-GPU job with 600 of 1000 steps done (0.5 s/step measured: 200 s left),
    n2 a 2-GPU job with 990 of 1000 done (0.1 s/step: 1 s left). Queued: a 4-GPU job of 100 steps and two
    1-GPU jobs, short (10 steps) and long (2000 steps)."""
    nodes = (SlurmNode("n1", "v100", 4, True, ("p",)), SlurmNode("n2", "v100", 4, True, ("p",)))
    spec = {
        "r1": JobSpec("resnet50", 64, 1000, 0.5),
        "r2": JobSpec("resnet50", 64, 1000, 0.1),
        "wide": JobSpec("resnet50", 64, 100, 0.1),
        "short": JobSpec("resnet50", 64, 10, 0.1),
        "long": JobSpec("resnet50", 64, 2000, 0.1),
    }
    gpus = {"r1": 1, "r2": 2, "wide": 4, "short": 1, "long": 1}
    running = {"r1": Placement("n1", (0,)), "r2": Placement("n2", (0, 1))}
    submit = {j: NOW - 300 for j in running}
    submit |= {"wide": NOW - queued_wait_s, "short": NOW - 1, "long": NOW - 1}
    return Snapshot(NOW, nodes, running, ("wide", "short", "long"), spec, gpus, submit,
                    {"r1": NOW - 290, "r2": NOW - 290}, progress={"r1": 600.0, "r2": 990.0},
                    speed={"r1": 0.5, "r2": 0.1})


def test_a_round_keeps_the_node_that_frees_first_for_the_starving_job() -> None:
    """The wide job has waited 100 s, ten times its 10 s run: n2 (free in 1 s) is kept for it. Its two free
    GPUs go to no job that runs longer than 1 s; the long job starts on n1. Without the guard (factor 0), or
    before the wide job starves, both 1-GPU jobs start and n2 fills up."""
    config = RoundConfig(time_limit_s=2.0, starvation_factor=2.0)
    placed, _ = decide(_snap(100.0), config)
    started = {j: p.node for j, p in placed.items() if j not in ("r1", "r2")}
    assert started.get("long") == "n1" and started.get("short") in (None, "n1") and "wide" not in started
    assert all(p.node != "n2" for j, p in placed.items() if j in ("short", "long"))
    for snap, factor in ((_snap(100.0), 0.0), (_snap(5.0), 2.0)):
        free_run, _ = decide(snap, RoundConfig(time_limit_s=2.0, starvation_factor=factor))
        assert {"short", "long"} <= set(free_run)


def test_a_job_slurm_cannot_place_now_takes_no_gpus_from_others() -> None:
    """No node has the wide job's four GPUs free (n1 three, n2 two). The round model would spread it over both
    nodes, which its Slurm request (one node) forbids: it waited, and the GPUs the plan gave it stayed idle
    while the long job waited too. Now it stays out of the solve and both 1-GPU jobs start."""
    placed, plan = decide(_snap(5.0), RoundConfig(time_limit_s=2.0))
    assert "wide" not in {a.job_id for a in plan.assignments}
    assert {"short", "long"} <= set(placed) and "wide" not in placed


def test_a_starving_job_whose_gpus_are_free_starts_there() -> None:
    """Both nodes idle: the starving wide job starts at once on the node kept for it, the others are solved
    around it (also when it is the only job of the round)."""
    snap = _snap(100.0)
    idle = Snapshot(NOW, snap.nodes, {}, snap.queued, snap.specs, snap.num_gpus, snap.submit_time, {})
    config = RoundConfig(time_limit_s=2.0, starvation_factor=2.0)
    placed, _ = decide(idle, config)
    assert len(placed["wide"].gpus) == 4 and {"short", "long"} <= set(placed)
    assert all(p.node != placed["wide"].node for j, p in placed.items() if j != "wide")
    alone = Snapshot(NOW, snap.nodes, {}, ("wide",), snap.specs, snap.num_gpus, snap.submit_time, {})
    assert set(decide(alone, config)[0]) == {"wide"}
