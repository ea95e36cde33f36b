"""The progress protocol between a training job and ``dltsched slurm``, without a Slurm: the record and its
file (written atomically, read without ever failing), the job's reporter (checkpoints, resume after a requeue,
pacing, its measured speed), and the daemon reading a folder of records into its round."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from dltsched.engine.app.adapters import slurm_round
from dltsched.engine.app.adapters.slurm import DaemonOptions, SlurmDaemon
from dltsched.engine.app.adapters.slurm_job import (
    MAX_RECORD_BYTES,
    ProgressRecord,
    ProgressReporter,
    job_id_from,
    main,
    progress_path,
    read_progress,
    read_progress_folder,
    run_training,
    write_progress,
)
from dltsched.engine.domain.errors import ValidationError

from .test_slurm_versions import T0, FakeSlurm, _job, _sinfo

GOOD = "dltsched:model=resnet50,batch=64,iters=1000,step_s=0.2"


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the record and its file


def test_record_round_trip_and_errors_name_the_field(tmp_path: Path) -> None:
    record = ProgressRecord("42", 310, 600, 300, 0.1012, 1764180000.5)
    assert ProgressRecord.from_json(record.to_json()) == record
    write_progress(tmp_path, record)
    assert json.loads((tmp_path / "42.json").read_text())["iterations"] == 310
    assert read_progress(tmp_path, "42") == record
    for text, path in [
        ('{"iterations": -1, "total": 5}', "progress.iterations"),
        ('{"iterations": NaN, "total": 5}', "progress.iterations"),
        ('{"iterations": true, "total": 5}', "progress.iterations"),
        ('{"iterations": 1}', "progress.total"),
        ('{"iterations": 1, "total": 5, "step_s": 0}', "progress.step_s"),
        ('{"iterations": 1, "total": 5, "time": "noon"}', "progress.time"),
        ("[1, 2]", "progress"),
        ("{torn", "progress"),
    ]:
        with pytest.raises(ValidationError) as err:
            ProgressRecord.from_json(text)
        assert err.value.path == path, text


def test_reader_never_fails_on_a_bad_file_or_id(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text("{torn")
    (tmp_path / "2.json").write_text(" " * (MAX_RECORD_BYTES + 1))
    write_progress(tmp_path, ProgressRecord("3", 1, 2))
    assert read_progress(tmp_path, "1") is None and read_progress(tmp_path, "2") is None
    assert read_progress(tmp_path, "../3") is None and read_progress(tmp_path, "404") is None
    assert set(read_progress_folder(tmp_path)) == {"3"}
    assert read_progress_folder(tmp_path / "missing") == {}
    with pytest.raises(ValidationError):
        progress_path(tmp_path, "../../etc/passwd")


def test_a_reader_never_sees_a_torn_record(tmp_path: Path) -> None:
    """A writer replaces the record 300 times while a reader reads it: every read is a whole record."""
    write_progress(tmp_path, ProgressRecord("7", 0, 300))
    stop, seen = threading.Event(), []

    def reader() -> None:
        while not stop.is_set():
            seen.append(read_progress(tmp_path, "7"))

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(1, 301):
        write_progress(tmp_path, ProgressRecord("7", i, 300, step_s=0.1 + i / 1000))
    stop.set()
    thread.join()
    assert seen and None not in seen
    assert [r.iterations for r in seen if r is not None] == sorted(
        r.iterations for r in seen if r is not None
    )


def test_job_id_from_slurm_environment() -> None:
    assert job_id_from({"SLURM_JOB_ID": "12"}) == "12"
    assert (
        job_id_from({"SLURM_JOB_ID": "13", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "3"}) == "10_3"
    )
    assert job_id_from({}) == ""


# --- the job's side


def test_reporter_checkpoints_and_resumes_after_a_requeue(tmp_path: Path) -> None:
    """Reports every 0.5 s, checkpoints every 10 s and at once when asked (the preemption signal); a restart
    (Slurm's requeue) resumes from the last checkpoint, not from the last report."""
    clock = Clock()
    rep = ProgressReporter(tmp_path, "5", 100, report_every_s=0.5, checkpoint_every_s=10, clock=clock)
    assert read_progress(tmp_path, "5") == ProgressRecord("5", 0, 100, 0, None, T0)  # written at start
    for _ in range(30):
        clock.now += 0.2
        rep.step_done(0.2)
    record = read_progress(tmp_path, "5")
    assert record is not None and 28 <= record.iterations <= 30 and record.checkpoint == 0
    assert record.step_s == pytest.approx(0.2)
    rep.checkpoint_requested = True  # SIGUSR1
    clock.now += 0.2
    rep.step_done(0.2)
    assert read_progress(tmp_path, "5") == ProgressRecord("5", 31, 100, 31, pytest.approx(0.2), clock.now)
    for _ in range(5):
        clock.now += 0.2
        rep.step_done(0.2)
    # reported 0.6 s after the checkpoint (every 0.5 s), not after each step
    assert read_progress(tmp_path, "5").iterations == 34  # type: ignore[union-attr]
    again = ProgressReporter(tmp_path, "5", 100, clock=clock)  # requeued: starts again
    assert (again.iterations, again.checkpoint) == (31, 31)
    assert read_progress(tmp_path, "5").iterations == 31  # type: ignore[union-attr]


def test_training_is_paced_and_its_speed_measured(tmp_path: Path) -> None:
    """Steps faster than the pace wait out the rest (speed = the pace); slower ones are reported as they are.
    The last record says every iteration is done and checkpointed."""
    wall = Clock(0.0)
    waited: list[float] = []
    compute = iter([0.02] * 10 + [0.3] * 10)

    def step() -> None:
        wall.now += next(compute)

    def sleep(s: float) -> None:
        waited.append(s)
        wall.now += s

    rep = ProgressReporter(tmp_path, "9", 20, report_every_s=100, checkpoint_every_s=100, clock=Clock())
    assert run_training(step, rep, pace_s=0.1, sleep=sleep, clock=wall) == 20
    assert len(waited) == 10 and all(w == pytest.approx(0.08) for w in waited)
    assert list(rep.steps)[:10] == [0.1] * 10 and list(rep.steps)[10:] == pytest.approx([0.3] * 10)
    assert wall.now == pytest.approx(10 * 0.1 + 10 * 0.3)
    last = read_progress(tmp_path, "9")
    assert last is not None and last.iterations == last.checkpoint == last.total == 20
    assert last.step_s == pytest.approx(0.2)  # the median of ten 0.1 s and ten 0.3 s steps


@pytest.mark.slow  # imports torch: seconds
def test_job_cli_trains_a_zoo_model_and_reports(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = CliRunner().invoke(
        main,
        ["--model", "ppo", "--batch", "4", "--iters", "3", "--progress", str(tmp_path), "--job-id", "77"],
    )
    assert out.exit_code == 0, out.output
    record = read_progress(tmp_path, "77")
    assert record is not None and record.iterations == record.total == 3 and record.step_s is not None
    missing = CliRunner().invoke(
        main,
        ["--model", "ppo", "--batch", "4", "--iters", "3", "--progress", str(tmp_path)],
        env={"SLURM_JOB_ID": ""},
    )
    assert missing.exit_code == 2 and "--job-id" in missing.output


# --- the daemon's side


def _daemon(tmp_path: Path, jobs: list[dict], preempt: bool = False) -> tuple[SlurmDaemon, Path]:
    folder = tmp_path / "progress"
    folder.mkdir()
    slurm = FakeSlurm({"errors": [], "jobs": jobs}, _sinfo(("n1", "v100", 2, [])))
    options = DaemonOptions(state_file=tmp_path / "s.json", progress_file=folder, preempt=preempt)
    return SlurmDaemon(options, slurm, clock=lambda: float(T0)), folder


def _running(job_id: int, started: int, gpu: int = 0, comment: str = GOOD) -> dict:
    return _job(
        job_id,
        comment,
        state="RUNNING",
        hold=False,
        nodes="n1",
        gres_detail=[f"gpu:v100:1(IDX:{gpu})"],
        start_time={"set": True, "infinite": False, "number": started},
    )


def test_daemon_reads_progress_and_speed_from_the_jobs_records(tmp_path: Path) -> None:
    """Job 1 runs and reported 400 iterations at 0.5 s per step: its progress and real speed. Job 2 was
    requeued: its record is from its earlier run (before Slurm's start time), so only its checkpoint counts.
    Job 3 is queued after a requeue: its checkpoint is its progress. Job 4 has no record."""
    jobs = [_running(1, T0 - 300), _running(2, T0 - 10, gpu=1), _job(3, GOOD), _job(4, GOOD)]
    daemon, folder = _daemon(tmp_path, jobs)
    write_progress(folder, ProgressRecord("1", 400, 1000, 390, 0.5, T0 - 1))
    write_progress(folder, ProgressRecord("2", 700, 1000, 600, 0.25, T0 - 60))
    write_progress(folder, ProgressRecord("3", 250, 1000, 200, 0.3, T0 - 100))
    write_progress(folder, ProgressRecord("99", 5, 10, 5, 0.1, T0))  # not a job of the partition
    (folder / "4.json").write_text("{torn")
    snap, _ = daemon.snapshot()
    assert snap.progress == {"1": 400.0, "2": 600.0, "3": 200.0}
    assert snap.speed == {"1": 0.5}


def test_measured_speed_and_progress_reach_the_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --preempt, the round sees a running job's remaining iterations from its record and its measured
    step time on its GPU type (over the comment's step_s); a queued job resumes from its checkpoint."""
    jobs = [_running(1, T0 - 300), _job(3, GOOD)]
    daemon, folder = _daemon(tmp_path, jobs, preempt=True)
    write_progress(folder, ProgressRecord("1", 400, 1000, 390, 0.5, T0 - 1))
    write_progress(folder, ProgressRecord("3", 250, 1000, 200, 0.3, T0 - 100))
    seen = {}
    from dltsched.engine.app import api

    real = api.solve_round

    def spy(state, *args, **kw):  # type: ignore[no-untyped-def]
        seen["state"], seen["measured"] = state, kw["measurements"]
        return real(state, *args, **kw)

    monkeypatch.setattr(api, "solve_round", spy)
    daemon.round()
    remaining = {s.job.id: s.remaining_iterations for s in seen["state"].jobs}
    assert remaining == {"1": 600.0, "3": 800.0}
    assert seen["measured"].jobs["1"].step_time_s == {"*": 0.2, "v100": 0.5}
    assert seen["measured"].jobs["3"].step_time_s == {"*": 0.2}
    measured = slurm_round.job_measurements(daemon.snapshot()[0], {"1"}, {})
    assert measured.jobs["1"].step_time_s == {"*": 0.2}  # no GPU type known: the comment's alone
