"""``dltsched slurm`` against a real slurmctld/slurmd (``scripts/slurm-sandbox.sh``; ``make test-slurm``).

Every job trains a small zoo model on CPU for its iterations (``python -m
dltsched.engine.app.adapters.slurm_job``: real forward, backward and optimizer steps, each lasting at least
the step time of the GPU it stands for) and writes its progress where the daemon reads it
(``--progress-file``). Both dltsched and Slurm's backfill are told each job's length: dltsched by its comment
(iterations and seconds per step), backfill by its time limit. Slurm counts time limits in whole minutes, so
the jobs compared last whole minutes less a few seconds. Checked: every job completes, on the node and GPU
count the plan chose, no GPU index held by two running jobs at once; average JCT under dltsched beats
Slurm's own backfill on the same job set; a daemon killed mid-run (SIGKILL) and restarted still finishes
every job. Skipped when no sandbox is running.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dltsched.engine.app.adapters.slurm import JobSpec, format_comment, parse_squeue_json
from dltsched.engine.app.adapters.slurm_job import read_progress_folder
from dltsched.engine.domain.errors import ValidationError

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PARTITION = "dltsched"
#: (GPUs, minutes, model, batch) in submission order: a seeded shuffle of long and short, wide and narrow jobs
JOB_SET = [
    (4, 3, "neumf", 64),
    (1, 1, "ppo", 8),
    (2, 3, "td3", 8),
    (4, 2, "a2c", 8),
    (1, 2, "neumf", 64),
    (2, 1, "ppo", 8),
    (1, 3, "td3", 8),
    (4, 1, "neumf", 64),
    (2, 2, "a2c", 8),
    (1, 1, "ppo", 8),
    (2, 1, "td3", 8),
    (1, 2, "neumf", 64),
]
#: seconds per step of the GPU a job stands for (each CPU step above takes well under it)
STEP_S = 0.1
#: seconds a job of N minutes is shorter than N minutes: its start (Python, torch, the model) fits in them
START_S = 25


def _slurm(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def sandbox() -> Iterator[None]:
    conf = os.environ.get("SLURM_CONF", "")
    if shutil.which("sinfo") is None or shutil.which("slurmctld") is None:
        pytest.skip("Slurm is not installed (bash scripts/slurm-sandbox.sh)")
    if not conf or not Path(conf).is_file():
        pytest.skip("SLURM_CONF does not name a Slurm configuration (make test-slurm sets it)")
    try:
        states = _slurm("sinfo", "-h", "-p", PARTITION, "-o", "%t").split()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        pytest.skip("the Slurm sandbox is not running (bash scripts/slurm-sandbox.sh)")
    if not states:
        pytest.skip(f"no partition '{PARTITION}' in this Slurm")
    _wait_idle()
    yield


def _wait_idle(timeout_s: float = 120.0) -> None:
    """No job of the partition pending or running (a previous test's leftovers are cancelled)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        active = [
            j
            for j in parse_squeue_json(_slurm("squeue", "--json", "-p", PARTITION))
            if j.state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
        ]
        if not active:
            return
        held = [j.job_id for j in active if j.state == "PENDING"]
        if held:
            _slurm("scancel", *held)
        time.sleep(1.0)
    raise AssertionError("the sandbox partition did not drain")


def _submit(
    gpus: int,
    seconds: float,
    *,
    hold: bool,
    tag: str,
    progress: Path,
    model: str = "neumf",
    batch: int = 64,
    limit_min: int | None = None,
) -> str:
    """Submit a job training ``model`` for ``seconds / STEP_S`` steps, reporting to ``progress``. Both
    schedulers get the same information: dltsched's comment says the steps and the step time, and the job's
    time limit (``limit_min``; default: its length and half a minute, in whole minutes) says how long it
    runs."""
    iters = round(seconds / STEP_S)
    spec = JobSpec(model, batch, iters, STEP_S)
    limit = limit_min if limit_min is not None else math.ceil((seconds + 30) / 60)
    work = job_command(model, batch, iters, progress)
    args = [
        "sbatch",
        "--parsable",
        "-p",
        PARTITION,
        f"--gres=gpu:{gpus}",
        "-N1",
        "-n1",
        "-c1",
        "--mem=10",
        f"--time={limit}",
        "--requeue",
        "--open-mode=append",
        "-o",
        str(progress / f"{tag}-%j.out"),
        "-J",
        f"{tag}-{gpus}x{seconds:g}",
        f"--comment={format_comment(spec)}",
        f"--wrap={work}",
    ]
    return _slurm(*(args[:2] + (["--hold"] if hold else []) + args[2:])).strip().split(";")[0]


def job_command(model: str, batch: int, iters: int, progress: Path) -> str:
    """The job's shell command: USR1 (the daemon's preemption signal) is ignored until the job's own handler,
    which checkpoints, is in place (a signal while Python starts must not kill it)."""
    return (
        f"trap '' USR1; exec {sys.executable} -m dltsched.engine.app.adapters.slurm_job --model {model} "
        f"--batch {batch} --iters {iters} --pace {STEP_S} --checkpoint-every 5 --progress {progress}"
    )


def _progress_dir(tmp: Path) -> Path:
    folder = tmp / "progress"
    folder.mkdir(exist_ok=True)
    return folder


def _check_progress(progress: Path, done: dict[str, dict]) -> None:
    """Every job's last record says it did all its iterations, at a speed no faster than its pace."""
    records = read_progress_folder(progress, set(done))
    assert set(records) == set(done), sorted(set(done) - set(records))
    for job_id, r in records.items():
        assert r.iterations == r.total == r.checkpoint, (job_id, r)
        assert r.step_s is not None and r.step_s >= STEP_S, (job_id, r)


class Watcher:
    """Polls squeue while jobs run: which (node, GPU index) each running job holds, and overlaps."""

    def __init__(self, ids: set[str]) -> None:
        self.ids, self.seen, self.overlaps = ids, {}, []  # type: ignore[var-annotated]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.is_set():
            try:
                jobs = parse_squeue_json(_slurm("squeue", "--json", "-p", PARTITION, "-t", "RUNNING"))
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValidationError):
                time.sleep(0.5)  # slurmctld away or restarting ("Failed while looking for jobs"): ask again
                continue
            held: dict[tuple[str, int], str] = {}
            for j in jobs:
                if j.job_id not in self.ids or not j.gpus or not all(j.gpus.values()):
                    continue  # Slurm 22.05 shows some running jobs without GPU indices for a moment
                self.seen[j.job_id] = dict(j.gpus)
                for node, idx in j.gpus.items():
                    for g in idx:
                        if (node, g) in held:
                            self.overlaps.append((node, g, held[node, g], j.job_id))
                        held[node, g] = j.job_id
            time.sleep(0.5)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def _wait_done(ids: set[str], timeout_s: float) -> dict[str, dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = json.loads(_slurm("squeue", "--json", "-t", "all"))
        jobs = {str(j["job_id"]): j for j in data["jobs"] if str(j["job_id"]) in ids}
        if len(jobs) == len(ids) and all(
            j["job_state"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") for j in jobs.values()
        ):
            return jobs
        time.sleep(1.0)
    raise AssertionError(f"jobs {sorted(ids)} did not finish within {timeout_s:.0f} s")


def _avg_jct(jobs: dict[str, dict]) -> float:
    return sum(j["end_time"] - j["submit_time"] for j in jobs.values()) / len(jobs)


def _daemon(tmp: Path, *, wait_ready: bool = True, extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """The daemon as its own process; with ``wait_ready``, returns once it has finished its first round (its
    state file is written), so start-up time does not count in the jobs' JCT."""
    state = tmp / "state.json"
    ready_before = state.stat().st_mtime_ns if state.exists() else None
    cmd = [
        sys.executable,
        "-m",
        "dltsched.engine.app.cli.main",
        "-v",
        "slurm",
        "--partition",
        PARTITION,
        "--poll",
        "1",
        "--solver-time-limit",
        "2",
        "--state-file",
        str(state),
        "--events",
        str(tmp / "events.jsonl"),
        "--progress-file",
        str(_progress_dir(tmp)),
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=(tmp / "daemon.out").open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while wait_ready and time.monotonic() < deadline:
        if state.exists() and state.stat().st_mtime_ns != ready_before:
            break
        assert proc.poll() is None, (tmp / "daemon.out").read_text()[-2000:]
        time.sleep(0.2)
    return proc


def _events(tmp: Path) -> list[dict]:
    path = tmp / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _timeline(jobs: dict[str, dict], order: list[str]) -> str:
    """One line per job: GPUs, limit, wait and run seconds (relative to the first submission)."""
    t0 = min(j["submit_time"] for j in jobs.values())
    return "\n".join(
        f"  {jobs[k]['name']:<14} submit {jobs[k]['submit_time'] - t0:4d} start "
        f"{jobs[k]['start_time'] - t0:4d} end {jobs[k]['end_time'] - t0:4d} on {jobs[k]['nodes']}"
        for k in order
    )


def _makespan(jobs: dict[str, dict]) -> int:
    return max(j["end_time"] for j in jobs.values()) - min(j["submit_time"] for j in jobs.values())


@pytest.mark.timeout(3600)
def test_dltsched_beats_backfill_and_runs_where_planned(sandbox: None, tmp_path: Path) -> None:
    timeout = 60 * sum(m for _, m, _, _ in JOB_SET)
    work = [(g, 60 * m - START_S, model, batch, m) for g, m, model, batch in JOB_SET]
    # Slurm alone: the same jobs, released at submission, scheduled by sched/backfill
    bf_dir = tmp_path / "backfill"
    bf_dir.mkdir()
    bf_order = [
        _submit(
            g, s, hold=False, tag="bf", progress=_progress_dir(bf_dir), model=model, batch=batch, limit_min=m
        )
        for g, s, model, batch, m in work
    ]
    watch = Watcher(set(bf_order))
    backfill = _wait_done(set(bf_order), timeout)
    watch.close()
    assert all(j["job_state"] == "COMPLETED" for j in backfill.values())
    assert watch.overlaps == []
    _check_progress(_progress_dir(bf_dir), backfill)
    _wait_idle()

    # dltsched: the same jobs, submitted held, decided by the daemon (DLTSCHED_SLURM_ARGS: more options)
    daemon = _daemon(tmp_path, extra=tuple(os.environ.get("DLTSCHED_SLURM_ARGS", "").split()))
    try:
        order = [
            _submit(
                g,
                s,
                hold=True,
                tag="dl",
                progress=_progress_dir(tmp_path),
                model=model,
                batch=batch,
                limit_min=m,
            )
            for g, s, model, batch, m in work
        ]
        ids = set(order)
        watch = Watcher(ids)
        ours = _wait_done(ids, timeout)
        watch.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert all(j["job_state"] == "COMPLETED" for j in ours.values()), {
        k: j["job_state"] for k, j in ours.items()
    }
    assert all(j["restart_cnt"] == 0 for j in ours.values())
    _check_progress(_progress_dir(tmp_path), ours)
    starts = {e["job"]: e for e in _events(tmp_path) if e["action"] == "start"}
    assert set(starts) == ids  # every job started by the daemon, once
    for job_id, (gpus, *_) in zip(order, JOB_SET, strict=True):
        assert ours[job_id]["nodes"] == starts[job_id]["node"]  # the node the plan chose
        assert len(starts[job_id]["gpus"]) == gpus
        assert watch.seen[job_id] == {starts[job_id]["node"]: watch.seen[job_id][starts[job_id]["node"]]}
        assert len(watch.seen[job_id][starts[job_id]["node"]]) == gpus  # that many GPUs, on that node only
    assert watch.overlaps == []
    jct_bf, jct_dl = _avg_jct(backfill), _avg_jct(ours)
    gpu_s = sum(
        g * (j["end_time"] - j["start_time"])
        for (g, *_), j in zip(JOB_SET, [ours[k] for k in order], strict=True)
    )
    print(
        f"\nslurm live: {len(JOB_SET)} jobs training on CPU, all completed; "
        f"avg JCT dltsched {jct_dl:.1f} s vs "
        f"Slurm backfill {jct_bf:.1f} s ({100 * (jct_dl / jct_bf - 1):+.1f}%); makespan dltsched "
        f"{_makespan(ours)} s vs {_makespan(backfill)} s (busy GPU-seconds / 8 GPUs: {gpu_s / 8:.0f} s)"
    )
    print("backfill:\n" + _timeline(backfill, bf_order) + "\ndltsched:\n" + _timeline(ours, order))
    assert jct_dl < jct_bf


def test_daemon_killed_mid_run_and_restarted_finishes_every_job(sandbox: None, tmp_path: Path) -> None:
    _wait_idle()
    jobs = [(2, 8), (4, 10), (1, 12), (2, 6), (4, 8), (1, 4), (2, 10), (1, 6)]
    daemon = _daemon(tmp_path)
    ids = {_submit(g, s, hold=True, tag="rc", progress=_progress_dir(tmp_path)) for g, s in jobs}
    deadline = time.monotonic() + 120
    while len(_events(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    daemon.send_signal(signal.SIGKILL)  # no chance to clean up
    daemon.wait(timeout=10)
    started_before = {e["job"] for e in _events(tmp_path)}
    assert 0 < len(started_before) < len(jobs)
    time.sleep(3)
    restarted = _daemon(tmp_path, wait_ready=False)
    try:
        done = _wait_done(ids, 300)
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=30)
    assert all(j["job_state"] == "COMPLETED" for j in done.values())
    assert all(j["restart_cnt"] == 0 for j in done.values())  # none ran twice
    _check_progress(_progress_dir(tmp_path), done)
    starts = [e["job"] for e in _events(tmp_path) if e["action"] == "start"]
    assert len(starts) == len(set(starts)) and set(starts) <= ids  # no job released twice
    # the event is written after the release: a kill between the two loses at most that one line
    assert len(ids - set(starts)) <= 1
    print(
        f"\nslurm recovery: {len(jobs)} jobs, daemon SIGKILLed after {len(started_before)} starts, "
        "restarted; "
        f"all {len(done)} completed, each started once"
    )


def test_drained_node_gets_no_new_job(sandbox: None, tmp_path: Path) -> None:
    _wait_idle()
    _slurm("scontrol", "update", "NodeName=dl2", "State=DRAIN", "Reason=dltsched-test")
    daemon = _daemon(tmp_path)
    try:
        ids = {
            _submit(g, s, hold=True, tag="dr", progress=_progress_dir(tmp_path))
            for g, s in [(2, 4), (2, 4), (4, 3)]
        }
        done = _wait_done(ids, 120)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        _slurm("scontrol", "update", "NodeName=dl2", "State=RESUME")
    assert all(j["job_state"] == "COMPLETED" and j["nodes"] == "dl1" for j in done.values())
