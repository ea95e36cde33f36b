"""Chaos on the sandbox's real Slurm (``make test-slurm``): one run of held dltsched jobs while slurmctld is
stopped and started again, a slurmd is restarted, a node is drained and resumed, a running job is preempted
(signal, grace, requeue), a job that cannot be priced is submitted, and the daemon is killed (SIGKILL) and
started again. Checked: every good job completes; each started once per requeue; no GPU ever held by two
jobs; the bad job stays held with its reason in its comment; nothing else stays held."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from dltsched.engine.app.adapters.slurm import JobSpec, format_comment, parse_squeue_json

from .test_slurm_live import (  # noqa: F401  (sandbox: the fixture)
    PARTITION,
    Watcher,
    _check_progress,
    _daemon,
    _events,
    _progress_dir,
    _slurm,
    _submit,
    _wait_done,
    _wait_idle,
    job_command,
    sandbox,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]
SANDBOX = Path(os.environ.get("DLTSCHED_SLURM_DIR", "/tmp/dltsched-slurm"))
SCRIPT = Path(__file__).parents[2] / "scripts" / "slurm-sandbox.sh"


def _restart(pidfile: str, down_s: float) -> None:
    """Stop the sandbox daemon whose pid is in ``pidfile`` and start it again with the sandbox script."""
    pid = int((SANDBOX / "run" / pidfile).read_text().strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    time.sleep(down_s)
    subprocess.run(["bash", str(SCRIPT)], check=True, capture_output=True, timeout=180)


def _daemon_with(tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    """The live tests' daemon with ``extra`` arguments, returned at once (no wait for its first round)."""
    return _daemon(tmp, wait_ready=False, extra=extra)


@pytest.mark.usefixtures("sandbox")
def test_chaos_run_every_job_finishes(tmp_path: Path) -> None:
    _wait_idle()
    # Slurm 22.05 keeps GPUs of jobs that ran through a slurmd restart counted as used on an idle node until
    # slurmctld restarts (an earlier chaos run leaves that behind): start from a clean controller
    _restart("slurmctld.pid", down_s=0)
    extra = ("--preempt", "--preempt-grace", "3")
    daemon = _daemon_with(tmp_path, *extra)
    watch = Watcher(set())
    log = []
    try:
        progress = _progress_dir(tmp_path)
        long_jobs = {
            _submit(4, 60, hold=True, tag="long", progress=progress) for _ in range(2)
        }  # one node each
        deadline = time.monotonic() + 120
        while not all(
            j.state == "RUNNING"
            for j in parse_squeue_json(_slurm("squeue", "--json", "-p", PARTITION))
            if j.job_id in long_jobs
        ):
            assert time.monotonic() < deadline, "the long jobs did not start"
            time.sleep(0.5)
        ids = set(long_jobs) | {
            _submit(g, s, hold=True, tag="chaos", progress=progress, model=model, batch=8)
            for g, s, model in [(1, 6, "ppo"), (2, 8, "td3"), (1, 10, "a2c"), (2, 6, "ppo")]
        }
        bad = (
            _slurm(
                "sbatch",
                "--parsable",
                "--hold",
                "-p",
                PARTITION,
                "--gres=gpu:1",
                "-N1",
                "-n1",
                "-c1",
                "--mem=10",
                "--time=2",
                "-o",
                "/dev/null",
                "--comment=dltsched:model=my-llama-ft,batch=8,iters=100",
                "--wrap=sleep 1",
            )
            .strip()
            .split(";")[0]
        )
        watch.ids = set(ids)
        time.sleep(3)
        _restart("slurmctld.pid", down_s=8)
        log.append("slurmctld stopped 8 s and restarted")
        urgent = format_comment(JobSpec("neumf", 64, 40, 0.1, weight=50.0))  # short, wide and heavy
        work = job_command("neumf", 64, 40, progress)
        ids.add(
            _slurm(
                "sbatch",
                "--parsable",
                "--hold",
                "-p",
                PARTITION,
                "--gres=gpu:4",
                "-N1",
                "-n1",
                "-c1",
                "--mem=10",
                "--time=1",
                "--requeue",
                "-o",
                "/dev/null",
                "-J",
                "urgent",
                f"--comment={urgent}",
                f"--wrap={work}",
            )
            .strip()
            .split(";")[0]
        )
        watch.ids = set(ids)
        time.sleep(8)
        _restart("slurmd-dl2.pid", down_s=2)
        log.append("slurmd dl2 restarted")
        _slurm("scontrol", "update", "NodeName=dl1", "State=DRAIN", "Reason=chaos")
        time.sleep(6)
        _slurm("scontrol", "update", "NodeName=dl1", "State=RESUME")
        log.append("dl1 drained 6 s and resumed")
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
        time.sleep(2)
        daemon = _daemon_with(tmp_path, *extra)
        log.append("daemon SIGKILLed and restarted")
        done = _wait_done(ids, 600)
    finally:
        watch.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    states = {k: j["job_state"] for k, j in done.items()}
    assert set(states.values()) == {"COMPLETED"}, states
    events = _events(tmp_path)
    starts = Counter(e["job"] for e in events if e["action"] == "start")
    for job_id, j in done.items():
        # each start is one release of the job; a kill between release and event line loses at most one line
        assert j["restart_cnt"] <= starts[job_id] <= j["restart_cnt"] + 1, (
            job_id,
            j["restart_cnt"],
            starts[job_id],
        )
    assert sum(max(0, starts[j] - 1 - done[j]["restart_cnt"]) for j in done) == 0
    assert watch.overlaps == []
    _check_progress(progress, done)
    bad_job = next(j for j in json.loads(_slurm("squeue", "--json"))["jobs"] if str(j["job_id"]) == bad)
    assert bad_job["job_state"] == "PENDING" and "# dltsched: unknown model" in bad_job["comment"]
    pending = [
        j
        for j in json.loads(_slurm("squeue", "--json", "-p", PARTITION))["jobs"]
        if j["job_state"] == "PENDING" and str(j["job_id"]) != bad
    ]
    assert pending == []
    preempted = sorted({e["job"] for e in events if e["action"] == "requeue"})
    signalled = sorted({e["job"] for e in events if e["action"] == "signal"})
    assert set(preempted) <= set(signalled)
    for job_id in preempted:  # checkpointed on the signal, resumed from it when Slurm started it again
        out = (progress / f"long-{job_id}.out").read_text() if job_id in long_jobs else ""
        assert job_id not in long_jobs or "resumes at checkpoint" in out, out
    _slurm("scancel", bad)
    jct = sum(j["end_time"] - j["submit_time"] for j in done.values()) / len(done)
    print(
        f"\nslurm chaos: {len(done)} jobs completed, avg JCT {jct:.1f} s ({'; '.join(log)}); "
        f"starts {sum(starts.values())}, requeues by Slurm or dltsched "
        f"{sum(j['restart_cnt'] for j in done.values())}, signalled {signalled}, "
        f"requeued by dltsched {preempted}; bad job {bad} held with its reason"
    )
