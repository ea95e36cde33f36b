"""``dltsched slurm`` against a real slurmctld/slurmd (``scripts/slurm-sandbox.sh``; ``make test-slurm``).

Jobs sleep for their duration (measured step time x iterations, in seconds) on the sandbox's fake GPUs; both
dltsched and Slurm's backfill are told that duration (the comment; the job's time limit).
Checked: every job completes, on the node and GPU count the plan chose, no GPU index held by two running
jobs at once; average JCT under dltsched beats Slurm's own backfill on the same job set; a daemon killed
mid-run (SIGKILL) and restarted still finishes every job. Skipped when no sandbox is running.
"""

from __future__ import annotations

import json
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

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PARTITION = "dltsched"
#: (GPUs, seconds) in submission order: a seeded shuffle of long and short, wide and narrow jobs
JOB_SET = [(4, 40), (1, 6), (2, 36), (4, 30), (1, 24), (2, 5), (1, 12), (4, 10), (2, 20), (1, 8), (2, 16), (1, 4)]
STEP_S = 0.1


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
        active = [j for j in parse_squeue_json(_slurm("squeue", "--json", "-p", PARTITION))
                  if j.state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]
        if not active:
            return
        held = [j.job_id for j in active if j.state == "PENDING"]
        if held:
            _slurm("scancel", *held)
        time.sleep(1.0)
    raise AssertionError("the sandbox partition did not drain")


def _submit(gpus: int, seconds: int, *, hold: bool, tag: str) -> str:
    """Submit a job sleeping ``seconds``. Both schedulers get the same information: its time limit is its
    duration (plus 15 s; Slurm takes ``M:SS``), and dltsched's comment says the same (steps x step time)."""
    spec = JobSpec("resnet50", 64, seconds / STEP_S, STEP_S)
    limit = seconds + 15
    args = ["sbatch", "--parsable", "-p", PARTITION, f"--gres=gpu:{gpus}", "-N1", "-n1", "-c1", "--mem=10",
            f"--time={limit // 60}:{limit % 60:02d}", "--requeue", "-o", "/dev/null", "-J", f"{tag}-{gpus}x{seconds}",
            f"--comment={format_comment(spec)}", f"--wrap=trap '' USR1; sleep {seconds}"]
    return _slurm(*(args[:2] + (["--hold"] if hold else []) + args[2:])).strip().split(";")[0]


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
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
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
        if len(jobs) == len(ids) and all(j["job_state"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
                                         for j in jobs.values()):
            return jobs
        time.sleep(1.0)
    raise AssertionError(f"jobs {sorted(ids)} did not finish within {timeout_s:.0f} s")


def _avg_jct(jobs: dict[str, dict]) -> float:
    return sum(j["end_time"] - j["submit_time"] for j in jobs.values()) / len(jobs)


def _daemon(tmp: Path, *, wait_ready: bool = True) -> subprocess.Popen[bytes]:
    """The daemon as its own process; with ``wait_ready``, returns once it has finished its first round (its
    state file is written), so start-up time does not count in the jobs' JCT."""
    state = tmp / "state.json"
    ready_before = state.stat().st_mtime_ns if state.exists() else None
    cmd = [sys.executable, "-m", "dltsched.engine.app.cli.main", "-v", "slurm", "--partition", PARTITION, "--poll", "1",
           "--solver-time-limit", "2", "--state-file", str(state), "--events", str(tmp / "events.jsonl")]
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


def test_dltsched_beats_backfill_and_runs_where_planned(sandbox: None, tmp_path: Path) -> None:
    timeout = 10 * sum(s for _, s in JOB_SET)
    # Slurm alone: the same jobs, released at submission, scheduled by sched/backfill
    ids = {_submit(g, s, hold=False, tag="bf") for g, s in JOB_SET}
    watch = Watcher(ids)
    backfill = _wait_done(ids, timeout)
    watch.close()
    assert all(j["job_state"] == "COMPLETED" for j in backfill.values())
    assert watch.overlaps == []
    _wait_idle()

    # dltsched: the same jobs, submitted held, decided by the daemon
    daemon = _daemon(tmp_path)
    try:
        order = [_submit(g, s, hold=True, tag="dl") for g, s in JOB_SET]
        ids = set(order)
        watch = Watcher(ids)
        ours = _wait_done(ids, timeout)
        watch.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert all(j["job_state"] == "COMPLETED" for j in ours.values()), {k: j["job_state"] for k, j in ours.items()}
    assert all(j["restart_cnt"] == 0 for j in ours.values())
    starts = {e["job"]: e for e in _events(tmp_path) if e["action"] == "start"}
    assert set(starts) == ids  # every job started by the daemon, once
    for job_id, (gpus, _) in zip(order, JOB_SET, strict=True):
        assert ours[job_id]["nodes"] == starts[job_id]["node"]  # the node the plan chose
        assert len(starts[job_id]["gpus"]) == gpus
        assert watch.seen[job_id] == {starts[job_id]["node"]: watch.seen[job_id][starts[job_id]["node"]]}
        assert len(watch.seen[job_id][starts[job_id]["node"]]) == gpus  # that many GPUs, on that node only
    assert watch.overlaps == []
    jct_bf, jct_dl = _avg_jct(backfill), _avg_jct(ours)
    print(f"\nslurm live: {len(JOB_SET)} jobs, all completed; avg JCT dltsched {jct_dl:.1f} s vs "
          f"Slurm backfill {jct_bf:.1f} s ({100 * (jct_dl / jct_bf - 1):+.1f}%); makespan dltsched "
          f"{max(j['end_time'] for j in ours.values()) - min(j['submit_time'] for j in ours.values())} s vs "
          f"{max(j['end_time'] for j in backfill.values()) - min(j['submit_time'] for j in backfill.values())} s")
    assert jct_dl < jct_bf


def test_daemon_killed_mid_run_and_restarted_finishes_every_job(sandbox: None, tmp_path: Path) -> None:
    _wait_idle()
    jobs = [(2, 8), (4, 10), (1, 12), (2, 6), (4, 8), (1, 4), (2, 10), (1, 6)]
    daemon = _daemon(tmp_path)
    ids = {_submit(g, s, hold=True, tag="rc") for g, s in jobs}
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
    starts = [e["job"] for e in _events(tmp_path) if e["action"] == "start"]
    assert len(starts) == len(set(starts)) and set(starts) <= ids  # no job released twice
    # the event is written after the release: a kill between the two loses at most that one line
    assert len(ids - set(starts)) <= 1
    print(f"\nslurm recovery: {len(jobs)} jobs, daemon SIGKILLed after {len(started_before)} starts, restarted; "
          f"all {len(done)} completed, each started once")


def test_drained_node_gets_no_new_job(sandbox: None, tmp_path: Path) -> None:
    _wait_idle()
    _slurm("scontrol", "update", "NodeName=dl2", "State=DRAIN", "Reason=dltsched-test")
    daemon = _daemon(tmp_path)
    try:
        ids = {_submit(g, s, hold=True, tag="dr") for g, s in [(2, 4), (2, 4), (4, 3)]}
        done = _wait_done(ids, 120)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        _slurm("scontrol", "update", "NodeName=dl2", "State=RESUME")
    assert all(j["job_state"] == "COMPLETED" and j["nodes"] == "dl1" for j in done.values())
