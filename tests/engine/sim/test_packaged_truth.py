"""The package carries Gavel's measured throughputs: the measured truth needs no data folder, says which
truth and which measurements a run used, and warns once when it has to fall back to the analytic model."""

from __future__ import annotations

import json
import logging

import pytest

from dltsched.engine.domain.model import Cluster, Instance, Job
from dltsched.engine.sim import truth as truth_module
from dltsched.engine.sim.simulator import simulate
from dltsched.engine.sim.truth import MeasuredTruth
from dltsched.instances.readers import gavel_throughputs
from dltsched.instances.readers.gavel_throughputs import PACKAGED_THROUGHPUTS, read_gavel_throughputs


def test_packaged_copy_carries_its_licence_and_provenance() -> None:
    folder = PACKAGED_THROUGHPUTS.parent
    assert "MIT License" in (folder / "LICENSE.md").read_text()
    assert "stanford-futuredata/gavel" in (folder / "SOURCE.md").read_text()
    raw = json.loads(PACKAGED_THROUGHPUTS.read_text())
    assert {"k80", "p100", "v100"} <= set(raw)
    # Lucid's data is non-commercial: the package must never carry it
    shipped = {p.name for p in PACKAGED_THROUGHPUTS.parents[1].rglob("*")}
    assert not {"colocate_info.csv", "single_data.csv"} & shipped


def test_truth_without_a_data_folder_is_measured_from_the_packaged_copy(tmp_path, monkeypatch) -> None:
    """An empty data folder has no Gavel table: the truth reads the packaged one, isolated step time on a
    measured (model, batch, GPU) is Gavel's 1/throughput, and no Lucid pair is loaded."""
    monkeypatch.setenv("DLTSCHED_DATA", str(tmp_path))
    truth = MeasuredTruth()
    assert truth.kind == "measured"
    assert truth.sources == ("gavel:packaged",)
    table = read_gavel_throughputs(PACKAGED_THROUGHPUTS)
    steps_per_s = next(v for (gpu, jt, scale, cons), v in table.isolated.items()
                       if gpu == "v100" and jt.model == "resnet50" and scale == 1 and cons)
    jt = next(jt for (gpu, jt, scale, cons) in table.isolated if gpu == "v100" and jt.model == "resnet50")
    job = Job("x", "resnet50", jt.batch_size, 10, dataset=jt.dataset)
    assert truth.step_time_s(job, "v100", 1) == pytest.approx(1.0 / steps_per_s, rel=1e-9)


@pytest.mark.data
def test_packaged_copy_gives_the_data_folders_numbers(data_dir, tmp_path, monkeypatch) -> None:
    """The packaged table is the data folder's Gavel table: the same step times either way."""
    from_folder = MeasuredTruth(data_dir=str(data_dir))
    monkeypatch.setenv("DLTSCHED_DATA", str(tmp_path))
    packaged = MeasuredTruth()
    assert from_folder.sources[0] == "gavel" and packaged.sources == ("gavel:packaged",)
    for model, batch, gpu, n in (("resnet50", 64, "v100", 1), ("resnet18", 32, "k80", 4),
                                 ("a3c", 4, "p100", 2)):
        job = Job("x", model, batch, 10, num_gpus=n)
        assert packaged.step_time_s(job, gpu, n) == from_folder.step_time_s(job, gpu, n)


def test_result_names_its_truth(tmp_path, monkeypatch) -> None:
    from dltsched.engine.policies.greedy import FifoPolicy

    monkeypatch.setenv("DLTSCHED_DATA", str(tmp_path))
    inst = Instance("one", Cluster.homogeneous("v100", 1, 1), (Job("a", "resnet18", 32, 100),))
    measured = simulate(inst, FifoPolicy(), truth=MeasuredTruth())
    analytic = simulate(inst, FifoPolicy(), truth=MeasuredTruth(use_measurements=False))
    assert (measured.truth, measured.truth_sources) == ("measured", ("gavel:packaged",))
    assert (analytic.truth, analytic.truth_sources) == ("analytic", ())
    assert measured.to_dict()["truth"] == "measured"
    assert measured.makespan_s != analytic.makespan_s


def test_unreadable_table_falls_back_to_analytic_with_one_warning(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("DLTSCHED_DATA", str(tmp_path))
    monkeypatch.setattr(gavel_throughputs, "PACKAGED_THROUGHPUTS", tmp_path / "missing.json")
    monkeypatch.setattr(truth_module, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger=truth_module.__name__):
        first, second = MeasuredTruth(), MeasuredTruth()
    assert first.kind == second.kind == "analytic"
    warnings = [r for r in caplog.records if "analytic" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.data
def test_generated_instances_are_the_same_with_or_without_the_data_folder(data_dir, tmp_path,
                                                                           monkeypatch) -> None:
    """The generator turns durations into iterations with the truth's step times: the packaged Gavel table
    gives what the data folder's gives, so `instance generate` writes the same instance on a bare clone."""
    import dltsched.engine  # noqa: F401 (registers the simulator's truth for the generator)
    from dltsched.instances.generator import GeneratorSpec, generate_instance
    from dltsched.instances.reference import reference_step_time

    spec = GeneratorSpec(num_jobs=40, num_gpus=16, seed=3)
    with_folder = generate_instance(spec, data_dir=str(data_dir))
    monkeypatch.setenv("DLTSCHED_DATA", str(tmp_path))
    assert reference_step_time().truth.sources == ("gavel:packaged",)  # an empty folder: the packaged table
    bare = generate_instance(spec)
    assert [j.total_iterations for j in bare.jobs] == [j.total_iterations for j in with_folder.jobs]


def test_reference_step_times_without_any_data_folder_are_the_packaged_measurements(monkeypatch) -> None:
    import dltsched.engine  # noqa: F401 (registers the simulator's truth)
    import dltsched.instances.datadir as datadir
    from dltsched.instances.reference import reference_step_time

    monkeypatch.delenv(datadir.ENV_VAR, raising=False)
    monkeypatch.setattr(datadir, "_candidates", lambda: [])
    ref = reference_step_time()
    assert ref.source == "gavel measured (packaged copy)"
    assert ref.truth.kind == "measured" and ref.truth.sources == ("gavel:packaged",)
