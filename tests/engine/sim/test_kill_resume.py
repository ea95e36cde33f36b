"""kill -9 a faulted optimizing run of ``dltsched simulate --checkpoint`` at random points and resume it: the
output is identical, byte for byte, to the uninterrupted run without checkpoints (wall-clock fields aside:
``wall_time_s`` and ``decision_time_*`` measure this machine, not the schedule).

The fast test kills twice; the ``slow`` one at 10 random points (a seeded draw, printed)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dltsched.instances.schema import save_instance

CLI = [sys.executable, "-c", "import sys; from dltsched.engine.app.cli.main import main; sys.exit(main())"]
#: a harsh fault process (a node fails every 15 min on average) so that failures interrupt running jobs
RUN = ["simulate", "--policy", "optimizing", "--seed", "4", "--faults", "900:300:120", "--predictors",
       "analytic", "--option", "time_limit_s=0.5", "--records", "--json"]
WALL_CLOCK = ("wall_time_s", "decision_time_")


def comparable(path: Path) -> bytes:
    """The result file without its wall-clock fields, as canonical JSON bytes."""
    (data,) = json.loads(path.read_text())["rows"]
    kept = {k: v for k, v in data.items() if not k.startswith(WALL_CLOCK)}
    return json.dumps(kept, sort_keys=True, indent=1).encode()


def run(instance: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONHASHSEED": str(random.randrange(1 << 30))}  # resumes see other hash seeds
    return subprocess.Popen([*CLI, *RUN, "--instance", str(instance), *extra], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)


def saved_rounds(ckpt: Path) -> int:
    try:
        return int(json.loads(ckpt.read_bytes())["state"]["rounds"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_instance):
    folder = tmp_path_factory.mktemp("kill-resume")
    instance = save_instance(small_instance(21, num_jobs=30, mean_gap_s=20.0), folder / "instance.json")
    out = folder / "uninterrupted.json"
    proc = run(instance, "-o", str(out))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()
    (result,) = json.loads(out.read_text())["rows"]
    assert result["num_jobs_finished"] == 30
    assert result["node_failures"] > 0 and result["fault_interruptions"] > 0, "the run must be a faulted one"
    return instance, comparable(out), result["num_rounds"]


def kill_and_resume(instance: Path, folder: Path, points: list[int]) -> tuple[bytes, int]:
    """Kill the run once its checkpoint holds ``points[i]`` rounds (plus a random few ms), resume, repeat;
    returns the final output and how many processes were killed while running."""
    ckpt, out = folder / "run.ckpt.json", folder / "out.json"
    args = ("--checkpoint", str(ckpt), "--checkpoint-every", "1", "-o", str(out))
    killed = 0
    for point in points:
        proc = run(instance, *args)
        while proc.poll() is None and saved_rounds(ckpt) < point:
            time.sleep(0.01)
        time.sleep(random.uniform(0.0, 0.05))  # mid-round, mid-write or between saves
        if proc.poll() is not None:  # finished before the kill point: nothing left to kill
            break
        os.kill(proc.pid, signal.SIGKILL)
        killed += 1
        proc.communicate(timeout=600)
        assert not out.exists(), "a killed run wrote its output"
    proc = run(instance, *args)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()
    assert not list(folder.glob("*.tmp")), "temporary files left behind"
    return comparable(out), killed


def test_two_kills_resume_to_the_identical_output(reference, tmp_path):
    instance, expected, rounds = reference
    points = [rounds // 3, 2 * rounds // 3]
    got, killed = kill_and_resume(instance, tmp_path, points)
    assert killed == 2
    assert got == expected


@pytest.mark.slow
def test_ten_random_kills_resume_to_the_identical_output(reference, tmp_path):
    instance, expected, rounds = reference
    rng = random.Random(14)
    points = sorted(rng.sample(range(1, rounds - 5), 10))
    print(f"kill points (rounds saved before the kill): {points} of {rounds}")
    got, killed = kill_and_resume(instance, tmp_path, points)
    print(f"killed {killed} running processes; output identical: {got == expected}")
    assert killed >= 9  # a kill point may be passed while the previous resume starts up
    assert got == expected
