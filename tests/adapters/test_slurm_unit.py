"""The Slurm daemon's pieces without a Slurm: the comment convention, parsing of answers recorded from the
sandbox's Slurm 22.05 (``data/``), the plan -> scontrol translation, and whole rounds against a fake
Slurm that replays those answers (restart and crash recovery included)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from dltsched.engine.app.adapters.slurm import (
    Action,
    DaemonOptions,
    JobSpec,
    Placement,
    RoundConfig,
    SlurmDaemon,
    SlurmNode,
    Snapshot,
    decide,
    expand_hostlist,
    format_comment,
    parse_comment,
    parse_gres,
    parse_sinfo_json,
    parse_squeue_json,
    plan_actions,
)
from dltsched.engine.domain.errors import ValidationError

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


# --- comment convention

def test_comment_round_trip_and_other_comments() -> None:
    spec = parse_comment("dltsched:model=resnet50,batch=64,iters=1000,step_s=0.21,gpu_type=v100,weight=2")
    assert spec == JobSpec("resnet50", 64, 1000.0, 0.21, "v100", 2.0)
    assert parse_comment(format_comment(spec)) == spec
    assert parse_comment("nightly build") is None and parse_comment(None) is None


@pytest.mark.parametrize(("comment", "path"), [
    ("dltsched:model=resnet50,batch=64", "comment.iters"),
    ("dltsched:model=resnet50,batch=sixty,iters=10", "comment.batch"),
    ("dltsched:model=resnet50,batch=64,iters=-5", "comment.iters"),
    ("dltsched:model=resnet50,batch=64,iters=5,colour=red", "comment.colour"),
    ("dltsched:model=resnet50,batch64,iters=5", "comment"),
])
def test_malformed_comment_names_the_key(comment: str, path: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_comment(comment)
    assert err.value.path == path


# --- Slurm's answers (recorded from the sandbox)

def test_hostlist_and_gres() -> None:
    assert expand_hostlist("dl[1-3],gpu07") == ["dl1", "dl2", "dl3", "gpu07"]
    assert expand_hostlist("n[08-10]") == ["n08", "n09", "n10"]
    assert parse_gres("gpu:v100:2(IDX:0-1)") == ("v100", 2, (0, 1))
    assert parse_gres("gres:gpu:3") == (None, 3, ())
    assert parse_gres("gpu:v100:0(IDX:N/A)") == ("v100", 0, ())


def test_squeue_held_job() -> None:
    (job,) = parse_squeue_json(read("squeue_held.json"))
    assert (job.job_id, job.state, job.held, job.num_gpus, job.partition) == (
        "1",
        "PENDING",
        True,
        2,
        "dltsched",
    )
    assert parse_comment(job.comment) == JobSpec("resnet50", 64, 100.0, 0.05)


def test_squeue_running_jobs_with_gpu_indices() -> None:
    (released,) = parse_squeue_json(read("squeue_running.json"))  # job 1 after NodeList=dl2 + release
    assert (released.state, dict(released.gpus), released.held) == ("RUNNING", {"dl2": (0, 1)}, False)
    jobs = {j.job_id: j for j in parse_squeue_json(read("squeue_mixed.json"))}
    assert jobs["1"].state == "COMPLETED"
    assert dict(jobs["3"].gpus) == {"dl1": (1, 2)} and jobs["3"].num_gpus == 2 and not jobs["3"].held
    assert dict(jobs["4"].gpus) == {"dl2": (0, 1, 2)}


def test_sinfo_nodes() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read("sinfo_busy.json"))}
    assert set(nodes) == {"dl1", "dl2"}
    assert (nodes["dl1"].gpu_type, nodes["dl1"].num_gpus, nodes["dl1"].used_gpus) == ("v100", 4, (0, 1, 2))
    assert nodes["dl1"].usable


def test_drained_node_is_unusable_and_bad_answers_are_clear() -> None:
    data = json.loads(read("sinfo_busy.json"))
    data["nodes"][0]["state_flags"] = ["DRAIN"]
    assert [n.usable for n in parse_sinfo_json(json.dumps(data))] == [False, True]
    with pytest.raises(ValidationError, match="squeue --json: answer is not JSON"):
        parse_squeue_json("squeue: error: invalid option")
    with pytest.raises(ValidationError, match="no 'nodes' list"):
        parse_sinfo_json("{}")


# --- plan -> scontrol


def _snap(**kw: object) -> Snapshot:
    nodes = (
        SlurmNode("dl1", "v100", 4, True, ("dltsched",)),
        SlurmNode("dl2", "v100", 4, True, ("dltsched",)),
    )
    spec = JobSpec("resnet50", 64, 100.0, 0.05)
    base = dict(
        time_s=1000.0,
        nodes=nodes,
        running={"7": Placement("dl1", (0, 1))},
        queued=("8", "9", "10"),
        specs={j: spec for j in ("7", "8", "9", "10")},
        num_gpus={"7": 2, "8": 2, "9": 3, "10": 1},
        submit_time={j: 900.0 for j in ("7", "8", "9", "10")},
        start_time={"7": 950.0},
    )
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def test_plan_to_scontrol_commands() -> None:
    snap = _snap()
    placements = {
        "7": Placement("dl1", (0, 1)),
        "8": Placement("dl1", (2, 3)),
        "9": Placement("dl2", (0, 1, 2)),
        "10": Placement("dl1", (1,)),
    }  # 10 asks for a GPU job 7 holds: it waits
    actions = plan_actions(snap, placements, preempt=False)
    assert actions == [Action("start", "8", "dl1", (2, 3)), Action("start", "9", "dl2", (0, 1, 2))]
    assert actions[0].commands("1:00:00") == [
        ["scontrol", "update", "JobId=8", "NodeList=dl1", "TimeLimit=1:00:00"],
        ["scontrol", "release", "8"],
    ]
    assert Action("requeue", "7").commands() == [["scontrol", "requeuehold", "7"]]
    with pytest.raises(ValueError, match="action kind"):
        Action("cancel", "7").commands()


def test_preemption_only_when_asked_and_drained_nodes_take_nothing() -> None:
    moved = {"7": Placement("dl2", (0, 1)), "8": Placement("dl1", (0, 1))}
    assert plan_actions(_snap(), moved, preempt=False) == []  # 8 would need job 7's GPUs
    # preempting: signal first, GPUs stay taken through the grace period, then requeue and start
    assert plan_actions(_snap(), moved, preempt=True, grace_s=30) == [Action("signal", "7")]
    assert plan_actions(_snap(), moved, preempt=True, signalled={"7": 990.0}, grace_s=30) == []  # 10 s in
    assert plan_actions(_snap(), moved, preempt=True, signalled={"7": 960.0}, grace_s=30) == [
        Action("requeue", "7"),
        Action("start", "8", "dl1", (0, 1)),
    ]
    assert plan_actions(_snap(), moved, preempt=True) == [
        Action("signal", "7"),
        Action("requeue", "7"),
        Action("start", "8", "dl1", (0, 1)),
    ]  # no grace
    drained = (
        SlurmNode("dl1", "v100", 4, True, ("dltsched",)),
        SlurmNode("dl2", "v100", 4, False, ("dltsched",)),
    )
    assert plan_actions(_snap(nodes=drained), {"9": Placement("dl2", (0, 1, 2, 3))}, preempt=False) == []


def test_decide_places_queued_jobs_on_free_gpus_of_one_node() -> None:
    """Job 7 holds dl1 GPUs 0-1; 8 (2 GPUs), 9 (3) and 10 (1) fill the 6 free GPUs exactly (dl1 2-3, dl2 0-3):
    all start, each on one node with its own count (solve_round's checker has passed the plan)."""
    placements, plan = decide(_snap(), RoundConfig(time_limit_s=5.0))
    assert plan.status in ("optimal", "feasible")
    assert set(placements) == {"7", "8", "9", "10"}
    assert placements["7"] == Placement("dl1", (0, 1))
    taken = [(p.node, g) for p in placements.values() for g in p.gpus]
    assert len(taken) == len(set(taken)) == 2 + 2 + 3 + 1
    assert [len(placements[j].gpus) for j in ("8", "9", "10")] == [2, 3, 1]
    assert placements["9"].node == "dl2"  # 3 GPUs fit only there


def test_decide_leaves_down_and_foreign_gpus_alone() -> None:
    """dl2 is drained and another user's job holds dl1 GPUs 2-3: no GPU is free for 9 or 10."""
    drained = (
        SlurmNode("dl1", "v100", 4, True, ("dltsched",)),
        SlurmNode("dl2", "v100", 4, False, ("dltsched",)),
    )
    placements, _ = decide(_snap(nodes=drained, foreign={"dl1": (2, 3)}, queued=("9", "10")), RoundConfig())
    assert set(placements) == {"7"}  # dl1 has 0-1 (job 7) and 2-3 (others) taken


# --- whole rounds against a fake Slurm


class FakeSlurm:
    """Answers squeue/sinfo with recorded JSON; records every other command."""

    def __init__(self, jobs: list[dict], sinfo: str) -> None:
        self.jobs, self.sinfo, self.calls = jobs, sinfo, []  # type: ignore[var-annotated]

    def __call__(self, args: Sequence[str]) -> str:
        if args[0] == "squeue":
            return json.dumps({"errors": [], "jobs": self.jobs})
        if args[0] == "sinfo":
            return self.sinfo
        self.calls.append(list(args))
        return ""


def _job(
    job_id: int, state: str = "PENDING", reason: str = "JobHeldUser", gpus: int = 1, **kw: object
) -> dict:
    base = json.loads(read("squeue_held.json"))["jobs"][0]
    base.update(
        job_id=job_id,
        job_state=state,
        state_reason=reason,
        tres_per_node=f"gres:gpu:{gpus}",
        priority=0 if reason.startswith("JobHeld") else 100,
        **kw,
    )
    return base


def _idle_sinfo() -> str:
    data = json.loads(read("sinfo_busy.json"))
    for n in data["nodes"]:
        n.update(state="idle", gres_used="gpu:v100:0(IDX:N/A)")
    return json.dumps(data)


def test_round_releases_held_jobs_and_writes_state(tmp_path: Path) -> None:
    slurm = FakeSlurm(
        [_job(11, gpus=2), _job(12, gpus=4), _job(13, comment="no dltsched comment")], _idle_sinfo()
    )
    daemon = SlurmDaemon(
        DaemonOptions(state_file=tmp_path / "s.json", events_file=tmp_path / "e.jsonl"), slurm
    )
    actions = daemon.round()
    assert sorted(a.job_id for a in actions if a.kind == "start") == ["11", "12"]
    assert ["scontrol", "release", "13"] not in slurm.calls  # not dltsched's job
    released = json.loads((tmp_path / "s.json").read_text())["released"]
    assert sorted(released) == ["11", "12"] and len(released["12"]["gpus"]) == 4
    assert len((tmp_path / "e.jsonl").read_text().splitlines()) == 2


def test_restart_keeps_promises_and_takes_back_unplanned_jobs(tmp_path: Path) -> None:
    """After a crash: job 11 was released (state file) and is pending unheld: its GPUs stay promised;
    job 14 is pending unheld with no record (crash between release and state write): held again; job 15
    was released but Slurm requeued it by itself (restart count went up): held again."""
    state = {
        "version": 1,
        "released": {
            "11": {"node": "dl1", "gpus": [0, 1, 2, 3], "at": 1e12, "restarts": 0},
            "15": {"node": "dl2", "gpus": [0], "at": 1e12, "restarts": 0},
        },
    }
    (tmp_path / "s.json").write_text(json.dumps(state))
    slurm = FakeSlurm(
        [
            _job(11, reason="None", gpus=4),
            _job(14, reason="Priority"),
            _job(15, reason="None", restart_cnt=1),
            _job(16, gpus=4),
        ],
        _idle_sinfo(),
    )
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: 1e12 + 1)
    actions = daemon.round()
    holds = sorted(a.job_id for a in actions if a.kind == "hold")
    assert holds == ["14", "15"]
    starts = [a for a in actions if a.kind == "start"]
    assert [(a.job_id, a.node) for a in starts] == [("16", "dl2")]  # dl1 is promised to job 11
    assert sorted(json.loads((tmp_path / "s.json").read_text())["released"]) == ["11", "16"]


def test_malformed_comment_keeps_job_held_and_dry_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm = FakeSlurm([_job(21, comment="dltsched:model=resnet50"), _job(22)], _idle_sinfo())
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json", dry_run=True), slurm)
    actions = daemon.round()
    assert [(a.kind, a.job_id) for a in actions] == [("flag", "21"), ("start", "22")]
    assert "comment.batch: missing" in actions[0].reason
    assert slurm.calls == [] and not (tmp_path / "s.json").exists()
    out = capsys.readouterr().out
    assert "scontrol release 22" in out and "scontrol release 21" not in out
    assert "JobId=21 AdminComment=dltsched: comment.batch: missing" in out


def test_corrupt_state_file_falls_back_to_slurm(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("{not json")
    daemon = SlurmDaemon(
        DaemonOptions(state_file=tmp_path / "s.json"), FakeSlurm([_job(31, reason="None")], _idle_sinfo())
    )
    assert [a.kind for a in daemon.round()][:1] == ["hold"]  # pending unheld, unknown: taken back first


def test_cli_rejects_bad_settings_with_exit_2() -> None:
    from dltsched.engine.app.cli.main import main

    assert main(["slurm", "--once", "--backend", "quantum"]) == 2


def test_cli_without_slurm_or_with_slurm_down_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dltsched.engine.app.cli.main import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue here
    assert main(["slurm", "--once", "--state-file", str(tmp_path / "s.json")]) == 2
    assert "'squeue' not found" in capsys.readouterr().err
    down = tmp_path / "squeue"
    down.write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
    down.chmod(0o755)
    assert main(["slurm", "--once", "--state-file", str(tmp_path / "s.json")]) == 2
    assert "Unable to contact slurm controller" in capsys.readouterr().err


def test_released_job_is_promised_gpus_slurm_has_not_given_away(tmp_path: Path) -> None:
    """Jobs 42 and 43 (2 GPUs each) were released onto dl1 planned on GPUs 0-1 and 2-3; meanwhile job 41
    runs there on 0-1 (Slurm picks indices). 42 is promised the GPUs still free (2-3); 43 no longer fits and
    is taken back (held) to be re-planned."""
    state = {
        "version": 1,
        "released": {
            "42": {"node": "dl1", "gpus": [0, 1], "at": 1e12, "restarts": 0},
            "43": {"node": "dl1", "gpus": [2, 3], "at": 1e12, "restarts": 0},
        },
    }
    (tmp_path / "s.json").write_text(json.dumps(state))
    sinfo = json.loads(_idle_sinfo())
    sinfo["nodes"][0].update(state="mixed", gres_used="gpu:v100:2(IDX:0-1)")
    running = _job(
        41, state="RUNNING", reason="None", gpus=2, nodes="dl1", gres_detail=["gpu:v100:2(IDX:0-1)"]
    )
    slurm = FakeSlurm(
        [running, _job(42, reason="None", gpus=2), _job(43, reason="None", gpus=2)], json.dumps(sinfo)
    )
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: 1e12 + 1)
    snap, fixes = daemon.snapshot()
    assert dict(snap.running) == {"41": Placement("dl1", (0, 1)), "42": Placement("dl1", (2, 3))}
    assert fixes == [Action("hold", "43")] and "43" not in snap.specs
    assert snap.foreign == {}  # dl1's used GPUs are job 41's own
