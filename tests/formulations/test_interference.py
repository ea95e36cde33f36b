"""Multi-stage interference against hand-computed stages."""

from __future__ import annotations

import pytest

from dltsched.formulations.interference import Resident, isacpp_greedy_place, simulate_stages


def test_two_jobs_survivor_speeds_up() -> None:
    # both at half speed: job 0 (100 it) finishes at 200 s, job 1 has 200 - 100 = 100 it left,
    # alone at 1 it/s it finishes at 300 s. Cost = (200 - 100) + (300 - 200) = 200 s.
    out = simulate_stages([100, 200], [1.0, 1.0], lambda active: [0.5] * len(active))
    assert [s.active for s in out.stages] == [(0, 1), (1,)]
    assert out.completion_s == pytest.approx((200.0, 300.0))
    assert out.interference_cost_s == pytest.approx(200.0)


def test_three_jobs_with_pair_speeds() -> None:
    # rates 1, 2, 1 it/s; trio speeds 0.5 each, pair (1, 2) speeds 0.8 each.
    # stage 1: velocities 0.5, 1.0, 0.5 -> job 0 (50 it) done at 100 s; job 1 has 300 - 100 = 200 left,
    #          job 2 has 200 - 50 = 150 left.
    # stage 2: velocities 1.6, 0.8 -> job 1 done after 125 s (t = 225); job 2 has 150 - 100 = 50 left.
    # stage 3: job 2 alone at 1 it/s -> done at 275 s.
    def speeds(active: tuple[int, ...]) -> list[float]:
        return [0.5] * 3 if len(active) == 3 else [0.8, 0.8]

    out = simulate_stages([50, 300, 200], [1.0, 2.0, 1.0], speeds)
    assert out.completion_s == pytest.approx((100.0, 225.0, 275.0))
    assert out.isolated_s == pytest.approx((50.0, 150.0, 200.0))
    assert out.interference_cost_s == pytest.approx(50 + 75 + 75)
    assert [s.end_s for s in out.stages] == pytest.approx([100.0, 225.0, 275.0])


def test_finished_job_takes_no_stage() -> None:
    out = simulate_stages([0, 10], [1.0, 2.0], lambda active: [0.1] * len(active))
    assert out.completion_s == pytest.approx((0.0, 5.0))
    assert len(out.stages) == 1


def test_bad_input_names_the_problem() -> None:
    with pytest.raises(ValueError, match="rates"):
        simulate_stages([1, 2], [1.0], lambda a: [1.0])
    with pytest.raises(ValueError, match="speed"):
        simulate_stages([1, 2], [1.0, 1.0], lambda a: [0.5])


def test_isacpp_picks_least_added_interference() -> None:
    # GPU 0: resident 100 it; speeds 0.5 -> both finish at 200 s: +100 +100 = +200 s.
    # GPU 1: resident 1000 it; speeds 0.8 -> new done at 125 s (+25), resident 100 it done by then,
    #        900 left alone -> 1025 s (+25): +50 s. GPU 1 wins.
    new = Resident(100, 1.0)
    gpus = [[Resident(100, 1.0)], [Resident(1000, 1.0)]]
    gpu, cost = isacpp_greedy_place(new, gpus, lambda g, active: [0.5 if g == 0 else 0.8] * len(active))
    assert gpu == 1 and cost == pytest.approx(50.0)


def test_isacpp_prefers_empty_gpu_and_respects_capacity() -> None:
    new = Resident(100, 1.0)
    assert isacpp_greedy_place(new, [[Resident(5, 1.0)], []], lambda g, a: [0.5] * len(a)) == (1, 0.0)
    assert isacpp_greedy_place(new, [[Resident(5, 1.0)]], lambda g, a: [0.5] * len(a),
                               max_jobs_per_gpu=1)[0] is None
