"""Reference step times come from a ground truth taken through the domain protocol, not from the simulator."""

from __future__ import annotations

import subprocess
import sys

from dltsched.engine.domain.model import Job
from dltsched.engine.domain.protocols import ground_truth_factory
from dltsched.instances.datadir import find_data_dir
from dltsched.instances.reference import reference_step_time


class _FixedTruth:
    def __init__(self, data_dir: str | None) -> None:
        self.data_dir = data_dir
        self.asked: list[tuple[str, int, int]] = []

    def step_time_s(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1,
                    freeze_level: int = 0) -> float:
        self.asked.append((gpu_type, num_gpus, num_nodes))
        return 0.25 * num_gpus


def test_a_given_truth_gives_the_step_times_and_nodes_of_eight_gpus(tmp_path):
    made: list[_FixedTruth] = []

    def factory(data_dir: str | None) -> _FixedTruth:
        made.append(_FixedTruth(data_dir))
        return made[-1]

    ref = reference_step_time(tmp_path, truth=factory)
    job = Job("j", "resnet50", 64, 100.0, num_gpus=2)
    assert ref.step_time_s(job, "v100") == 0.5
    assert ref.step_time_s(job, "k80", 16) == 4.0
    assert made[0].data_dir == str(tmp_path) and ref.source.startswith("gavel measured")
    assert made[0].asked == [("v100", 2, 1), ("k80", 16, 2)]


def test_the_default_is_the_registered_truth_the_simulators():
    job = Job("j", "resnet50", 64, 100.0)
    ref = reference_step_time()
    base = find_data_dir(required=False)
    assert type(ref.truth).__name__ == "MeasuredTruth"
    # the data folder's table, or the packaged copy without one
    assert ref.source.startswith("gavel measured")
    truth = ground_truth_factory()(None if base is None else str(base))
    assert ref.step_time_s(job, "v100") == truth.step_time_s(job, "v100", 1, 1) > 0


def test_reading_instances_does_not_import_the_simulator():
    code = ("import sys, dltsched.instances.reference, dltsched.instances.generator;"
            "print(sorted(m for m in sys.modules if m.startswith('dltsched.engine.sim')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
