"""The Slurm daemon on every Slurm it claims: answers in the shapes of 22.05 (recorded from the sandbox) and
of 23.02 (OpenAPI v0.0.39), 23.11 (v0.0.40), 24.05 (v0.0.41) and 24.11 (v0.0.42), fixtures under
``data/slurm-*``; and the states a real cluster goes through: a running job with no GPU index, completing,
requeued held, pending unheld, drained and down nodes, typed gres, features, gang jobs, jobs that cannot be
priced, preemption with a grace period, a round that fails."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from dltsched.engine.app.adapters.slurm import Action, DaemonOptions, Placement, SlurmDaemon
from dltsched.engine.app.adapters.slurm_parse import (
    constraint_features,
    job_state,
    number,
    parse_gres,
    parse_job,
    parse_sinfo_json,
    parse_squeue_json,
    satisfies,
)

DATA = Path(__file__).parent / "data"
VERSIONS = ("23.02", "23.11", "24.05", "24.11")
T0 = 1795500000


def fixture(version: str, name: str) -> str:
    return (DATA / f"slurm-{version}" / f"{name}.json").read_text()


class FakeSlurm:
    """Answers squeue/sinfo with fixed JSON; records every other command; ``fail`` raises once per entry."""

    def __init__(self, squeue: str | dict, sinfo: str, fail: list[BaseException] | None = None) -> None:
        self.squeue, self.sinfo, self.fail = squeue, sinfo, list(fail or [])
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str]) -> str:
        if self.fail:
            raise self.fail.pop(0)
        if args[0] == "squeue":
            return self.squeue if isinstance(self.squeue, str) else json.dumps(self.squeue)
        if args[0] == "sinfo":
            return self.sinfo
        self.calls.append(list(args))
        return ""


# --- the shapes


def test_numbers_states_and_gres_in_every_shape() -> None:
    assert number(5) == 5 and number("7") == 7 and number(None, 3) == 3
    assert number({"set": True, "infinite": False, "number": 42}) == 42
    assert number({"set": False, "infinite": False, "number": 9}, 1) == 1
    assert number({"set": True, "infinite": True, "number": 0}, -1) == -1
    assert number("nan") == 0 and number([1]) == 0 and number(True, 4) == 4
    assert job_state("RUNNING") == ("RUNNING", frozenset({"RUNNING"}))
    assert job_state(["COMPLETED", "COMPLETING"])[0] == "COMPLETING"
    assert job_state(["REQUEUE_HOLD"])[0] == "PENDING" and "HELD" in job_state(["REQUEUE_HOLD"])[1]
    assert job_state(["PENDING", "REQUEUED"])[0] == "PENDING"
    assert job_state("REQUEUED")[0] == "REQUEUED"  # 22.05: requeue in progress, still on its nodes
    assert job_state(None) == ("", frozenset())
    assert parse_gres("gres/gpu:a100:2") == ("a100", 2, ())
    assert parse_gres("gres/gpu=3") == (None, 3, ())
    assert parse_gres("gpu:h100:4(S:0-1)") == ("h100", 4, ())
    assert parse_gres("gpu:a100-80gb:2(IDX:1,3)") == ("a100-80gb", 2, (1, 3))
    assert parse_gres("gpu(IDX:0-1)") == (None, 2, (0, 1))
    assert parse_gres("gpu:v100:0(IDX:N/A)") == ("v100", 0, ())
    assert parse_gres("(null)") == (None, 0, ())


def test_comment_as_object_and_nodes_from_job_resources() -> None:
    job = parse_job(
        {
            "job_id": {"set": True, "infinite": False, "number": 9},
            "job_state": ["RUNNING"],
            "comment": {"administrator": "", "job": "dltsched:model=vgg16,batch=32,iters=10", "system": ""},
            "job_resources": {"nodes": {"count": 2, "list": "n[1-2]"}},
            "gres_detail": ["gpu:1(IDX:0)"],
            "tres_per_node": "gres/gpu:1",
            "node_count": {"set": True, "infinite": False, "number": 2},
        }
    )
    assert job.job_id == "9" and job.comment.startswith("dltsched:model=vgg16")
    assert dict(job.gpus) == {"n1": (0,), "n2": ()} and job.num_gpus == 2 and job.node_count == 2


def test_constraints() -> None:
    assert constraint_features("a100&ib|h100") == [{"a100", "ib"}, {"h100"}]
    assert constraint_features("") == [] and constraint_features("[rack1*2&ib]") == [{"rack1", "ib"}]
    assert constraint_features("a100 OR h100") is None
    assert satisfies(("ib", "a100"), "ib") and not satisfies(("a100",), "ib&a100") and satisfies((), "")
    assert not satisfies(("a",), "a!b")


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_every_version(version: str) -> None:
    jobs = {j.job_id: j for j in parse_squeue_json(fixture(version, "squeue"))}
    assert sorted(jobs) == ["101", "102", "103", "104", "105", "106", "107"]
    held = jobs["101"]
    assert (held.state, held.held, held.num_gpus, held.gpu_type, held.constraint) == (
        "PENDING",
        True,
        2,
        "a100",
        "ib",
    )
    gang = jobs["102"]
    assert (gang.state, gang.node_count, gang.num_gpus) == ("RUNNING", 2, 4)
    assert dict(gang.gpus) == {"gpu01": (0, 1), "gpu02": (0, 1)} and gang.start_time == T0 - 300
    assert dict(jobs["103"].gpus) == {"gpu03": ()}  # running, no index
    assert jobs["104"].state == "COMPLETING" and dict(jobs["104"].gpus) == {"gpu03": (3,)}
    assert (jobs["105"].state, jobs["105"].held, jobs["105"].restart_count) == ("PENDING", True, 1)
    assert (jobs["106"].state, jobs["106"].held) == ("PENDING", False)
    assert jobs["101"].submit_time == T0 - 600 + 101


@pytest.mark.parametrize("version", VERSIONS)
def test_sinfo_every_version(version: str) -> None:
    nodes = {n.name: n for n in parse_sinfo_json(fixture(version, "sinfo"))}
    assert (nodes["gpu01"].gpu_type, nodes["gpu01"].num_gpus, nodes["gpu01"].used_gpus) == ("a100", 4, (0, 1))
    assert nodes["gpu01"].features == ("ib", "a100") and nodes["gpu01"].usable
    assert (nodes["gpu03"].gpu_type, nodes["gpu03"].num_gpus, nodes["gpu03"].used_gpus) == (
        "h100",
        4,
        (0, 2, 3),
    )
    assert not nodes["gpu04"].usable and not nodes["gpu05"].usable  # drained, down
    assert nodes["cpu01"].num_gpus == 0 and nodes["cpu01"].partitions == ("batch",)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_whole_round_on_every_version(version: str, tmp_path: Path) -> None:
    """gpu01/gpu02 (a100, ib) have GPUs 2-3 free; gpu03 (h100) has only GPU 1 free: 0 is job 103's (no index
    given: the node's one unexplained used GPU), 2 someone else's, 3 job 104's (completing). gpu04 is drained
    and gpu05 down. So 101 (2 a100 with ib) starts on gpu01 or gpu02, 105 (1 GPU, requeued held) starts on a
    free GPU of an up node, 106 (pending, never released by us) is held again, and nothing lands on
    gpu04/05."""
    slurm = FakeSlurm(fixture(version, "squeue"), fixture(version, "sinfo"))
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    snap, _ = daemon.snapshot()
    assert snap.running["103"] == Placement("gpu03", (0,))
    assert snap.running["104"] == Placement("gpu03", (3,))
    assert snap.running["102"] == Placement("gpu01", (0, 1), (("gpu02", (0, 1)),))
    assert snap.foreign == {"gpu03": (2,)}
    assert snap.allowed["101"] == frozenset({"gpu01", "gpu02"}) and snap.node_count["102"] == 2
    actions = daemon.round()
    kinds = {(a.kind, a.job_id) for a in actions}
    assert ("hold", "106") in kinds
    starts = {a.job_id: a for a in actions if a.kind == "start"}
    assert set(starts) == {"101", "105"}
    assert starts["101"].node in ("gpu01", "gpu02") and starts["101"].gpus == (2, 3)
    assert not any(n in starts["105"].node for n in ("gpu04", "gpu05"))
    if starts["105"].node == "gpu03":
        assert starts["105"].gpus == (1,)
    released = json.loads((tmp_path / "s.json").read_text())["released"]
    assert released["105"]["restarts"] == 1  # the count Slurm shows: the next round keeps its promise
    assert ["scontrol", "release", "106"] not in slurm.calls


def _sinfo(*nodes: tuple[str, str, int, list[str]]) -> str:
    return json.dumps(
        {
            "errors": [],
            "nodes": [
                {
                    "name": n,
                    "gres": f"gpu:{t}:{c}",
                    "gres_used": f"gpu:{t}:0(IDX:N/A)",
                    "state": ["IDLE"],
                    "partitions": ["dltsched"],
                    "features": f,
                }
                for n, t, c, f in nodes
            ],
        }
    )


def _job(
    job_id: int,
    comment: str,
    gpus: int = 1,
    *,
    state: str = "PENDING",
    hold: bool = True,
    restarts: int = 0,
    **extra: object,
) -> dict:
    return {
        "job_id": job_id,
        "job_state": [state],
        "hold": hold,
        "state_reason": "JobHeldUser" if hold else "None",
        "partition": "dltsched",
        "comment": comment,
        "tres_per_node": f"gres/gpu:{gpus}",
        "submit_time": {"set": True, "infinite": False, "number": T0 - 100},
        "restart_cnt": restarts,
        **extra,
    }


GOOD = "dltsched:model=resnet50,batch=64,iters=1000"


def test_unpriceable_job_is_flagged_once_and_never_blocks_others(tmp_path: Path) -> None:
    """An unknown model with no step time cannot be priced: it stays held with the reason in its admin comment
    (once, not every round), and the valid job behind it starts. The same unknown model with step_s is priced
    by its own step time alone and starts too."""
    jobs = [
        _job(1, "dltsched:model=my-llama-ft,batch=8,iters=100"),
        _job(2, GOOD),
        _job(3, "dltsched:model=my-llama-ft,batch=8,iters=100,step_s=0.5"),
    ]
    slurm = FakeSlurm({"errors": [], "jobs": jobs}, _sinfo(("n1", "v100", 4, [])))
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    actions = daemon.round()
    assert sorted(a.job_id for a in actions if a.kind == "start") == ["2", "3"]
    (flag,) = [a for a in actions if a.kind == "flag"]
    assert flag.job_id == "1" and "unknown model" in flag.reason and "step_s" in flag.reason
    assert [
        "scontrol",
        "update",
        "JobId=1",
        f"Comment={jobs[0]['comment']} # dltsched: {flag.reason}",
    ] in slurm.calls
    assert any(
        c[:3] == ["scontrol", "update", "JobId=1"] and c[3].startswith("AdminComment=dltsched: ")
        for c in slurm.calls
    )
    slurm.squeue = {"errors": [], "jobs": [jobs[0]]}
    assert daemon.round() == []  # flagged already: nothing again
    # a restarted daemon reads the note in the comment: nothing again either, and the note is not the spec
    jobs[0]["comment"] += f" # dltsched: {flag.reason}"
    restarted = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    assert restarted.round() == []
    # the user fixes the comment: the job is planned
    jobs[0]["comment"] = "dltsched:model=my-llama-ft,batch=8,iters=100,step_s=0.3"
    assert [a.kind for a in daemon.round()] == ["start"]


def test_constraint_and_typed_gres_no_node_meets_is_flagged(tmp_path: Path) -> None:
    jobs = [_job(1, GOOD, features="ib"), _job(2, GOOD, tres_per_node="gres/gpu:h100:1"), _job(3, GOOD)]
    slurm = FakeSlurm({"errors": [], "jobs": jobs}, _sinfo(("n1", "v100", 2, ["eth"])))
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    actions = daemon.round()
    flags = {a.job_id: a.reason for a in actions if a.kind == "flag"}
    assert set(flags) == {"1", "2"} and "constraint 'ib'" in flags["1"] and "gres h100" in flags["2"]
    assert [a.job_id for a in actions if a.kind == "start"] == ["3"]


def test_typed_gres_and_features_choose_the_node(tmp_path: Path) -> None:
    jobs = [_job(1, GOOD, 2, tres_per_node="gres/gpu:a100:2"), _job(2, GOOD, 1, features="ib")]
    slurm = FakeSlurm(
        {"errors": [], "jobs": jobs},
        _sinfo(("v1", "v100", 4, ["ib"]), ("a1", "a100", 4, []), ("v2", "v100", 4, [])),
    )
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    starts = {a.job_id: a.node for a in daemon.round() if a.kind == "start"}
    assert starts == {"1": "a1", "2": "v1"}


def test_gang_job_gets_its_node_count_with_equal_gpus(tmp_path: Path) -> None:
    """-N 2 --gres=gpu:2: two nodes, two GPUs on each; the NodeList names both."""
    jobs = [_job(1, GOOD, 2, node_count={"set": True, "infinite": False, "number": 2})]
    slurm = FakeSlurm({"errors": [], "jobs": jobs}, _sinfo(("n1", "v100", 4, []), ("n2", "v100", 4, [])))
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    (start,) = [a for a in daemon.round() if a.kind == "start"]
    assert start.node == "n1,n2" and len(start.gpus) == 4
    assert ["scontrol", "update", "JobId=1", "NodeList=n1,n2"] in slurm.calls
    record = json.loads((tmp_path / "s.json").read_text())["released"]["1"]
    assert {k: len(v) for k, v in record["nodes"].items()} == {"n1": 2, "n2": 2}
    # next round: released, not started yet: its GPUs on both nodes are promised, nothing is re-held
    jobs[0].update(hold=False, state_reason="None")
    snap, fixes = daemon.snapshot()
    assert fixes == [] and set(snap.running["1"].per_node) == {"n1", "n2"}


def test_requeued_job_is_not_held_again_forever(tmp_path: Path) -> None:
    """A job with Restarts=1 released by the daemon and pending unheld (Slurm about to start it) keeps its
    promise: the daemon's record has the same restart count, so it is not held again."""
    slurm = FakeSlurm({"errors": [], "jobs": [_job(5, GOOD, restarts=1)]}, _sinfo(("n1", "v100", 4, [])))
    now = [float(T0)]
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: now[0])
    assert [a.kind for a in daemon.round()] == ["start"]
    slurm.squeue = {"errors": [], "jobs": [_job(5, GOOD, restarts=1, hold=False)]}
    for _ in range(5):
        now[0] += 1.2
        assert daemon.round() == []
    assert sum(1 for c in slurm.calls if c[:2] == ["scontrol", "hold"]) == 0
    # past the start timeout it is taken back, unless Slurm says it waits for its begin time (requeue delay)
    slurm.squeue = {"errors": [], "jobs": [_job(5, GOOD, restarts=1, hold=False, state_reason="BeginTime")]}
    now[0] += 120
    assert daemon.round() == []
    slurm.squeue = {"errors": [], "jobs": [_job(5, GOOD, restarts=1, hold=False, state_reason="Resources")]}
    assert [a.kind for a in daemon.round()][:1] == ["hold"]


def test_preemption_signals_waits_and_requeues_once(tmp_path: Path) -> None:
    """Job 1 runs on the only GPU; job 2 (heavier weight, shorter) is queued; with --preempt the plan stops 1.
    Round 1 signals it (USR1), the grace period keeps its GPU, round 3 requeues it held, and while Slurm has
    not yet taken it off the GPU no second requeue is sent."""
    running = _job(
        1,
        "dltsched:model=resnet50,batch=64,iters=100000",
        state="RUNNING",
        hold=False,
        nodes="n1",
        gres_detail=["gpu:v100:1(IDX:0)"],
        start_time={"set": True, "infinite": False, "number": T0 - 5},
    )
    queued = _job(2, "dltsched:model=resnet50,batch=64,iters=10,weight=50")
    slurm = FakeSlurm({"errors": [], "jobs": [running, queued]}, _sinfo(("n1", "v100", 1, [])))
    now = [float(T0)]
    options = DaemonOptions(state_file=tmp_path / "s.json", preempt=True, preempt_grace_s=30)
    daemon = SlurmDaemon(options, slurm, clock=lambda: now[0])
    assert [(a.kind, a.job_id) for a in daemon.round()] == [("signal", "1")]
    assert slurm.calls == [["scancel", "--signal=USR1", "--full", "1"]]
    now[0] += 10
    assert daemon.round() == []  # within the grace period
    now[0] += 25
    assert [(a.kind, a.job_id) for a in daemon.round()][:1] == [("requeue", "1")]
    assert sum(c == ["scontrol", "requeuehold", "1"] for c in slurm.calls) == 1
    now[0] += 5
    assert not any(a.kind == "requeue" for a in daemon.round())  # Slurm still shows it running: once only
    restarted = SlurmDaemon(options, slurm, clock=lambda: now[0])  # the daemon restarts: it remembers
    assert not any(a.kind in ("requeue", "signal") for a in restarted.round())
    running.update(job_state=["PENDING"], hold=True, restart_cnt=1, nodes="", gres_detail=[])
    restarted.round()
    assert json.loads((tmp_path / "s.json").read_text())["preempting"] == {}


def test_a_failing_round_never_kills_the_daemon(tmp_path: Path) -> None:
    """Any exception in a round (here an IndexError and a KeyError from a broken answer, and the controller
    away) is logged and the next round runs."""
    slurm = FakeSlurm(
        {"errors": [], "jobs": [_job(1, GOOD)]},
        _sinfo(("n1", "v100", 1, [])),
        fail=[IndexError("tuple index out of range"), KeyError("nodes")],
    )
    daemon = SlurmDaemon(
        DaemonOptions(state_file=tmp_path / "s.json", poll_s=0.1), slurm, clock=lambda: float(T0)
    )
    rounds = []
    real_round = daemon.round

    def counted() -> list[Action]:
        rounds.append(1)
        if len(rounds) >= 4:
            daemon.stopping = True
        if len(rounds) == 3:
            from dltsched.engine.app.adapters.slurm import SlurmCommandError

            raise SlurmCommandError("squeue: Unable to contact slurm controller")
        return real_round()

    daemon.round = counted  # type: ignore[method-assign]
    daemon.run_forever()
    assert len(rounds) == 4
    assert ["scontrol", "release", "1"] in slurm.calls


def test_running_job_on_a_node_outside_the_partition_and_garbage_fields(tmp_path: Path) -> None:
    jobs = [
        _job(1, GOOD, state="RUNNING", hold=False, nodes="elsewhere", gres_detail=["gpu:1(IDX:0)"]),
        _job(2, GOOD, state="RUNNING", hold=False, nodes="n1", gres_detail=None),
        {"job_id": 3, "job_state": 7, "partition": ["x"], "comment": None},
        "not a job",
        _job(4, GOOD),
    ]
    slurm = FakeSlurm({"errors": [], "jobs": jobs}, _sinfo(("n1", "v100", 2, [])))
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    snap, _ = daemon.snapshot()
    assert set(snap.running) == {"2"} and snap.running["2"].gpus == (0,)
    assert [a.job_id for a in daemon.round() if a.kind == "start"] == ["4"]


def test_used_gpus_of_an_idle_node_stay_taken() -> None:
    """Seen on the sandbox's Slurm 22.05 after a slurmd restart: an idle node still listing used GPUs, and
    Slurm not allocating them (a job released there did not start). They count as taken, as Slurm counts
    them."""
    answer = {
        "errors": [],
        "nodes": [
            {
                "name": "dl2",
                "state": "idle",
                "state_flags": [],
                "gres": "gpu:v100:4",
                "gres_used": "gpu:v100:2(IDX:0-1)",
                "partitions": ["dltsched"],
            },
            {
                "name": "dl4",
                "state": ["IDLE", "COMPLETING"],
                "gres": "gpu:v100:4",
                "gres_used": "gpu:v100:1(IDX:3)",
                "partitions": ["dltsched"],
            },
        ],
    }
    nodes = {n.name: n for n in parse_sinfo_json(json.dumps(answer))}
    assert nodes["dl2"].used_gpus == (0, 1) and nodes["dl4"].used_gpus == (3,)


def test_progress_file_gives_running_jobs_their_measured_progress(tmp_path: Path) -> None:
    """Jobs report iterations done to --progress-file; a running job's remaining work then comes from it (not
    from elapsed time). A file that cannot be read, or values that are not numbers, are ignored."""
    running = _job(
        1,
        GOOD,
        state="RUNNING",
        hold=False,
        nodes="n1",
        gres_detail=["gpu:v100:1(IDX:0)"],
        start_time={"set": True, "infinite": False, "number": T0 - 50},
    )
    slurm = FakeSlurm({"errors": [], "jobs": [running, _job(2, GOOD)]}, _sinfo(("n1", "v100", 2, [])))
    progress = tmp_path / "progress.json"
    options = DaemonOptions(state_file=tmp_path / "s.json", progress_file=progress)
    daemon = SlurmDaemon(options, slurm, clock=lambda: float(T0))
    progress.write_text(json.dumps({"1": 900, "2": "lots", "99": 5}))
    snap, _ = daemon.snapshot()
    assert snap.progress == {"1": 900.0}  # job 2 is not running, job 99 is unknown, "lots" is no number
    from dltsched.engine.app.adapters.slurm_round import RoundConfig, decide

    placements, plan = decide(snap, RoundConfig())
    assert "2" in placements and placements["2"].gpus == (1,)
    progress.write_text("{not json")
    assert daemon.snapshot()[0].progress == {}
