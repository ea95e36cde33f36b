"""The resource budget: every file read is streamed within a size cap, seed sweeps are bounded, a simulation
has a wall-clock cap and a fault process that rolls every job back forever is stopped. Each stop is one line
naming the cap (or the setting) and how to change it, exit code 2, and comes quickly."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dltsched.engine.domain.errors import SimulationStalledError, ValidationError
from dltsched.engine.domain.limits import LIMITS, limit, read_limited

pytestmark = pytest.mark.timeout(120)

TINY = Path(__file__).parents[2] / "instances" / "examples" / "tiny-4jobs-2gpus.json"


@pytest.fixture
def quick(run_cli_subprocess: Any, check_cli_outcome: Any) -> Any:
    """Run ``dltsched ARGV`` as a child process; it must fail with exit 2 and one line within ``seconds``."""
    def run(argv: list[str], seconds: float = 30.0) -> str:
        start = time.perf_counter()
        got = run_cli_subprocess(argv, timeout_s=seconds)
        check_cli_outcome(got, 2)
        assert time.perf_counter() - start < seconds
        return str(got.stderr)

    return run


def test_validate_of_an_endless_device_stops_at_once(quick: Any) -> None:
    assert "binary data" in quick(["instance", "validate", "/dev/urandom"])
    assert "binary data" in quick(["instance", "validate", "/dev/zero"])


def test_a_named_pipe_without_a_writer_is_an_error_not_a_wait(tmp_path: Path, quick: Any) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert "pipe with nothing written" in quick(["instance", "validate", str(fifo)], seconds=20)


def test_a_file_over_the_cap_names_the_cap_and_its_variable(tmp_path: Path, monkeypatch: Any, run_cli: Any,
                                                             check_cli_outcome: Any) -> None:
    big = tmp_path / "big.json"
    big.write_text(" " * (2 * 1024 * 1024) + TINY.read_text())
    monkeypatch.setenv("DLTSCHED_MAX_INPUT_MIB", "1")
    got = run_cli(["instance", "validate", str(big)])
    check_cli_outcome(got, 2)
    assert "max_input_mib is 1 MiB; set DLTSCHED_MAX_INPUT_MIB" in got.stderr
    monkeypatch.setenv("DLTSCHED_MAX_INPUT_MIB", "3")
    check_cli_outcome(run_cli(["instance", "validate", str(big)]), 0)


def test_a_streamed_pipe_over_the_cap_stops_at_the_cap(monkeypatch: Any) -> None:
    monkeypatch.setenv("DLTSCHED_MAX_INPUT_MIB", "1")
    writer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b' ' * (4 << 20))"],
                              stdout=subprocess.PIPE)
    assert writer.stdout is not None
    try:
        with pytest.raises(ValidationError, match="larger than 1 MiB; max_input_mib"):
            read_limited(f"/dev/fd/{writer.stdout.fileno()}", "stdin")
    finally:
        writer.kill()
        writer.communicate()


def test_a_bad_cap_setting_names_the_variable(monkeypatch: Any) -> None:
    monkeypatch.setenv("DLTSCHED_MAX_SEEDS", "NaN")
    with pytest.raises(ValidationError, match="DLTSCHED_MAX_SEEDS: 'NaN' not understood"):
        limit("max_seeds")


def test_a_device_as_checkpoint_is_refused_before_any_read_or_write(quick: Any) -> None:
    err = quick(["simulate", "--instance", str(TINY), "--policy", "fifo", "--checkpoint", "/dev/full"])
    assert "checkpoint '/dev/full': is not a regular file" in err
    assert Path("/dev/full").is_char_device()


def test_huge_seed_ranges_are_refused_before_anything_runs(tmp_path: Path, run_cli: Any,
                                                           check_cli_outcome: Any) -> None:
    got = run_cli(["batch", str(TINY), "--seeds", "0-100000000", "-o", str(tmp_path / "out")])
    check_cli_outcome(got, 2)
    assert f"more than {int(LIMITS['max_seeds'].default)} seeds" in got.stderr
    assert "DLTSCHED_MAX_SEEDS" in got.stderr
    for bad in ("5-2", "-1", "1-99999999999999999999"):
        check_cli_outcome(run_cli(["batch", str(TINY), "--seeds", bad, "-o", str(tmp_path / "out")]), 2)
    assert not (tmp_path / "out").exists()


def test_a_fault_process_faster_than_checkpoints_stops_with_a_clear_message(quick: Any) -> None:
    err = quick(["simulate", "--instance", str(TINY), "--policy", "fifo", "--faults", "0.001:1:1"],
                seconds=60)
    assert "no job finished or reached a checkpoint in 1000 node failures" in err
    assert "raise MTBF_S or lower CHECKPOINT_INTERVAL_S" in err


def test_a_harsh_but_survivable_fault_process_still_finishes(run_cli: Any, check_cli_outcome: Any) -> None:
    got = run_cli(["simulate", "--instance", str(TINY), "--policy", "fifo", "--predictors", "analytic",
                          "--faults", "600:60:30", "--json"])
    check_cli_outcome(got, 0)


def test_the_wall_clock_cap_stops_a_simulation(monkeypatch: Any, run_cli: Any,
                                               check_cli_outcome: Any) -> None:
    medium = TINY.with_name("medium-200jobs-64gpus.json")
    got = run_cli(["simulate", "--instance", str(medium), "--policy", "fifo", "--predictors", "analytic",
                          "--max-wall-s", "0.001"])
    check_cli_outcome(got, 2)
    assert "stopped after 0.001 s of wall-clock time (max_wall_s)" in got.stderr
    monkeypatch.setenv("DLTSCHED_MAX_SIM_WALL_S", "0.001")
    with pytest.raises(SimulationStalledError, match="DLTSCHED_MAX_SIM_WALL_S"):
        from dltsched.engine.app.api import load_instance_file, simulate_instance

        simulate_instance(load_instance_file(medium), "fifo", predictors="analytic")


def test_a_pipe_in_the_data_folder_is_refused_not_read(tmp_path: Path) -> None:
    from dltsched.instances.datadir import data_file

    os.mkfifo(tmp_path / "trace.csv")
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValidationError, match="not a regular file"):
        data_file("trace.csv", data_dir=tmp_path)
    assert data_file("sub", data_dir=tmp_path).is_dir()
