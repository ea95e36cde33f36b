"""Nodes that jobs share, without a Slurm: a job asking for whole nodes (``--exclusive``), a partition with
``OverSubscribe=EXCLUSIVE``, and a node whose CPUs or memory are all taken (another partition's exclusive job)
never get a second job planned on them; GPUs are never double-booked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from dltsched.engine.app.adapters.slurm import DaemonOptions, SlurmDaemon
from dltsched.engine.app.adapters.slurm_parse import job_exclusive, parse_oversubscribe, parse_sinfo_json

from .test_slurm_versions import T0, FakeSlurm, _job

GOOD = "dltsched:model=resnet50,batch=64,iters=1000,step_s=0.2"


class SharedSlurm(FakeSlurm):
    """A fake Slurm whose partition answers ``sinfo -o %h`` with ``oversubscribe``."""

    def __init__(self, jobs: list[dict], nodes: list[dict], oversubscribe: str = "no") -> None:
        super().__init__({"errors": [], "jobs": jobs}, json.dumps({"errors": [], "nodes": nodes}))
        self.oversubscribe = oversubscribe

    def __call__(self, args: Sequence[str]) -> str:
        if args[0] == "sinfo" and "%h" in args:
            return self.oversubscribe + "\n"
        return super().__call__(args)


def _node(name: str, gpus: int, *, alloc_cpus: int = 0, used: str = "N/A", state: str = "IDLE") -> dict:
    return {
        "name": name,
        "gres": f"gpu:v100:{gpus}",
        "gres_used": f"gpu:v100:0(IDX:{used})",
        "state": [state],
        "partitions": ["dltsched"],
        "cpus": 8,
        "alloc_cpus": alloc_cpus,
        "real_memory": 16000,
        "alloc_memory": 0,
    }


def _running(job_id: int, node: str, idx: str, **extra: object) -> dict:
    return _job(
        job_id,
        GOOD,
        state="RUNNING",
        hold=False,
        nodes=node,
        gres_detail=[f"gpu:v100:1(IDX:{idx})"],
        start_time={"set": True, "infinite": False, "number": T0 - 5},
        **extra,
    )


def _starts(tmp_path: Path, slurm: FakeSlurm) -> dict[str, str]:
    daemon = SlurmDaemon(DaemonOptions(state_file=tmp_path / "s.json"), slurm, clock=lambda: float(T0))
    return {a.job_id: a.node for a in daemon.round() if a.kind == "start"}


# --- reading it


def test_exclusive_jobs_and_partitions_in_every_shape() -> None:
    assert job_exclusive({"shared": "none"})  # 22.05, sbatch --exclusive
    assert job_exclusive({"shared": ["none"]}) and job_exclusive({"exclusive": ["true"]})  # 23.02+, 24.x
    assert not job_exclusive({"shared": None}) and not job_exclusive({"shared": "shared"})
    assert not job_exclusive({"shared": ["oversubscribe"], "exclusive": ["false"]}) and not job_exclusive({})
    assert parse_oversubscribe("exclusive\n") == "EXCLUSIVE" and parse_oversubscribe("force:4") == "FORCE"
    assert parse_oversubscribe("YES:2") == "YES" and parse_oversubscribe('{"errors": []}') == ""


def test_a_node_with_no_cpu_or_memory_left_is_full() -> None:
    nodes = {
        n.name: n
        for n in parse_sinfo_json(
            json.dumps(
                {
                    "errors": [],
                    "nodes": [
                        _node("a", 4, alloc_cpus=8),
                        _node("b", 4, alloc_cpus=3, state="MIXED"),
                        _node("c", 4, state="ALLOCATED"),
                        {**_node("d", 4), "alloc_memory": 16000},
                        {"name": "e", "gres": "gpu:2", "state": "idle"},
                    ],
                }
            )
        )
    }
    assert {name: n.full for name, n in nodes.items()} == {
        "a": True,
        "b": False,
        "c": True,
        "d": True,
        "e": False,
    }


# --- planning with it


@pytest.mark.parametrize("full", [True, False])
def test_no_job_on_a_node_another_job_holds_whole(tmp_path: Path, full: bool) -> None:
    """n1's CPUs are all taken by another partition's exclusive job (no GPU of it used): the 3-GPU job waits,
    as Slurm would not start it there. With n1's CPUs free it starts on n1 (n2 is too small)."""
    nodes = [_node("n1", 4, alloc_cpus=8 if full else 0), _node("n2", 2)]
    starts = _starts(tmp_path, SharedSlurm([_job(1, GOOD, gpus=3)], nodes))
    assert starts == ({} if full else {"1": "n1"})


def test_running_exclusive_job_keeps_its_node_whole(tmp_path: Path) -> None:
    """Job 1 runs --exclusive on one GPU of n1: the two queued jobs may not join it; one takes n2's GPU and
    the other waits, though n1 has three GPUs free."""
    jobs = [_running(1, "n1", "0", shared="none"), _job(2, GOOD), _job(3, GOOD)]
    starts = _starts(tmp_path, SharedSlurm(jobs, [_node("n1", 4, used="0"), _node("n2", 1)]))
    assert list(starts.values()) == ["n2"]


def test_queued_exclusive_jobs_get_nodes_of_their_own(tmp_path: Path) -> None:
    """Three --exclusive 1-GPU jobs and one shared job on two empty 4-GPU nodes: two exclusive jobs start,
    each alone on its node; nothing else starts with them."""
    jobs = [_job(i, GOOD, shared="none") for i in (1, 2, 3)] + [_job(4, GOOD)]
    starts = _starts(tmp_path, SharedSlurm(jobs, [_node("n1", 4), _node("n2", 4)]))
    assert sorted(starts.values()) == ["n1", "n2"] and set(starts) <= {"1", "2", "3"}


def test_exclusive_partition_gives_every_job_whole_nodes(tmp_path: Path) -> None:
    """OverSubscribe=EXCLUSIVE (``sinfo -o %h``): two 1-GPU jobs on two 4-GPU nodes run one per node; under
    OverSubscribe=NO they may share a node, and both start."""
    jobs = [_job(1, GOOD), _job(2, GOOD), _job(3, GOOD)]
    nodes = [_node("n1", 4), _node("n2", 4)]
    exclusive = _starts(tmp_path, SharedSlurm(jobs, nodes, "exclusive"))
    assert sorted(exclusive.values()) == ["n1", "n2"]
    (tmp_path / "s.json").unlink()
    assert len(_starts(tmp_path, SharedSlurm(jobs, nodes, "no"))) == 3


# --- the daemon's predictors


def test_calibration_reaches_the_rounds_and_a_bad_one_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``slurm --calibration CAL.json:mps`` prices the rounds with ``default@CAL.json:mps``, as simulate and
    solve do; a file that is no calibration bundle exits 2 with one line naming the option."""
    from dltsched.engine.app import registry
    from dltsched.engine.app.adapters import slurm
    from dltsched.engine.app.cli.main import main

    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["slurm", "--once", "--calibration", str(bad), "--state-file", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: calibration:") and err.count("\n") == 1
    seen: dict[str, DaemonOptions] = {}
    monkeypatch.setattr(registry, "calibration_bundle", lambda path: type("Bundle", (), {"gpus": {}})())
    monkeypatch.setattr(registry, "with_calibration", lambda name, cal: f"{name}@{cal}" if cal else name)
    monkeypatch.setattr(slurm.SlurmDaemon, "warm_up", lambda self: None)
    monkeypatch.setattr(
        slurm.SlurmDaemon, "run_forever", lambda self, once=False: seen.setdefault("o", self.options)
    )
    cal = tmp_path / "h200.json"
    assert main(["slurm", "--once", "--predictors", "crossfit", "--calibration", f"{cal}:mps"]) == 0
    assert seen["o"].round.predictors == f"crossfit@{cal}:mps"
