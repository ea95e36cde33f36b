"""Readers on the real data folder: row counts, windows and counts, dropping, model rule, CLI convert."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.domain.errors import ValidationError
from dltsched.instances.generator import GAVEL_JOB_TYPES
from dltsched.instances.readers import read_workload, workload_names
from dltsched.instances.readers.gavel_throughputs import parse_job_type
from dltsched.instances.readers.philly import read_philly_rows
from dltsched.instances.reference import reference_step_time
from dltsched.instances.schema import load_instance

pytestmark = pytest.mark.data
GAVEL_MODELS = {(t.model, t.batch_size) for t in map(parse_job_type, GAVEL_JOB_TYPES)}


def _csv_rows(path: Path) -> int:
    with path.open(newline="") as f:
        return sum(1 for row in csv.reader(f) if row) - 1


def test_philly_reads_every_row(data_dir: Path) -> None:
    rows = read_philly_rows(data_dir)
    assert len(rows) == _csv_rows(data_dir / "pollux" / "philly.csv") == 82_247
    assert min(r.arrival_s for r in rows) == 0.0
    assert {(r.model, r.batch_size) for r in rows} <= GAVEL_MODELS


def test_philly_count_subset_is_first_n_rebased(data_dir: Path) -> None:
    inst = read_workload("philly", data_dir=data_dir, cluster="v100:8x8", max_jobs=300)
    meta = inst.metadata
    assert meta["num_jobs_in_window"] == 300
    assert len(inst.jobs) + meta["dropped_too_large"] == 300
    arrivals = [j.arrival_time_s for j in inst.jobs]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    first = sorted(read_philly_rows(data_dir), key=lambda r: r.arrival_s)[:300]
    assert {j.id for j in inst.jobs} <= {r.id for r in first}


def test_philly_time_window(data_dir: Path) -> None:
    day_s = 86_400.0
    inst = read_workload(
        "philly", data_dir=data_dir, cluster="v100:16x8", start_s=30 * day_s, end_s=31 * day_s
    )
    expected = sum(30 * day_s <= r.arrival_s < 31 * day_s for r in read_philly_rows(data_dir))
    assert inst.metadata["num_jobs_in_window"] == expected > 0
    assert all(0.0 <= j.arrival_time_s < day_s for j in inst.jobs)
    assert inst.metadata["arrival_offset_s"] == 30 * day_s


def test_too_large_jobs_are_dropped_and_counted(data_dir: Path) -> None:
    inst = read_workload("philly", data_dir=data_dir, cluster="v100:1x2", max_jobs=2000)
    assert inst.metadata["dropped_too_large"] > 0
    assert len(inst.jobs) + inst.metadata["dropped_too_large"] == 2000
    assert max(j.num_gpus for j in inst.jobs) <= 2


def test_model_rule_is_seeded_and_stable_across_windows(data_dir: Path) -> None:
    small = read_workload("philly", data_dir=data_dir, cluster="v100:16x8", max_jobs=50)
    large = read_workload("philly", data_dir=data_dir, cluster="v100:16x8", max_jobs=500)
    models = {j.id: j.model for j in large.jobs}
    assert all(models[j.id] == j.model for j in small.jobs)
    other = read_workload("philly", data_dir=data_dir, cluster="v100:16x8", max_jobs=50, seed=1)
    assert [j.model for j in other.jobs] != [j.model for j in small.jobs]


def test_durations_become_iterations_on_the_reference_gpu(data_dir: Path) -> None:
    inst = read_workload("philly", data_dir=data_dir, cluster="v100:16x8", max_jobs=40)
    ref = reference_step_time(data_dir)
    for job in inst.jobs:
        assert job.duration_hint_s is not None
        predicted_s = job.total_iterations * ref.step_time_s(job, "v100")
        assert predicted_s == pytest.approx(job.duration_hint_s, abs=ref.step_time_s(job, "v100") + 1e-9)


def test_gavel_traces(data_dir: Path) -> None:
    trace_dir = data_dir / "gavel" / "traces_msr_seed0"
    vc = sorted(trace_dir.glob("*.trace"))[0]
    one = read_workload(f"gavel:{vc.stem}", data_dir=data_dir)
    assert one.metadata["num_rows_read"] == _csv_rows(vc) + 1
    assert len(one.jobs) + one.metadata["dropped_too_large"] == one.metadata["num_rows_read"]
    assert {(j.model, j.batch_size) for j in one.jobs} <= GAVEL_MODELS
    merged = read_workload("gavel", data_dir=data_dir, max_jobs=100)
    assert merged.metadata["num_rows_read"] == 15_264 and len(merged.jobs) == 100


def test_gavel_recommendation_jobs_are_recoder_and_ncf_jobs_stay_neumf(data_dir: Path) -> None:
    trace_dir = data_dir / "gavel" / "traces_msr_seed0"
    vc = next(p for p in sorted(trace_dir.glob("*.trace")) if "Recommendation" in p.read_text())
    labels = [line.split("\t")[0] for line in vc.read_text().splitlines() if line.strip()]
    inst = read_workload(f"gavel:{vc.stem}", data_dir=data_dir)
    assert inst.metadata["dropped_too_large"] == 0
    recommendation = sum(label.startswith("Recommendation") for label in labels)
    assert sum(j.model == "recoder" for j in inst.jobs) == recommendation > 0
    assert all(j.model != "neumf" for j in inst.jobs)
    pollux = read_workload("pollux:workload-1", data_dir=data_dir)
    assert "neumf" in {j.model for j in pollux.jobs} and "recoder" not in {j.model for j in pollux.jobs}


def test_pollux_deepspeech2_jobs_are_the_short_clip_gru_variant(data_dir: Path) -> None:
    jobs = [j for j in read_workload("pollux:workload-1", data_dir=data_dir).jobs if j.model == "deepspeech2"]
    assert jobs and {j.dataset for j in jobs} == {"cmu_arctic"}


def test_muri_trace_keeps_iterations(data_dir: Path) -> None:
    inst = read_workload("muri:trace1", data_dir=data_dir)
    assert inst.metadata["num_rows_read"] == 1494
    with (data_dir / "muri" / "simulator_trace-data" / "trace1.csv").open() as f:
        first = next(csv.DictReader(f))
    job = inst.job(f"muri-{first['job_id']}")
    assert job.total_iterations == float(first["iterations"])
    assert job.duration_hint_s == pytest.approx(float(first["duration"]) / 1000.0)


@pytest.mark.parametrize("name", ["sia:saturn/workload-1", "sia:philly/workload-2", "pollux:workload-1"])
def test_sia_and_pollux_workloads(data_dir: Path, name: str) -> None:
    inst = read_workload(name, data_dir=data_dir)
    assert inst.metadata["num_rows_read"] == 160
    for job in inst.jobs:
        global_batch = job.hyperparameter("global_batch_size")
        assert isinstance(global_batch, float)
        assert job.batch_size * job.num_gpus >= global_batch > (job.batch_size - 1) * job.num_gpus


def test_alibaba_pods_and_nodes(data_dir: Path) -> None:
    inst = read_workload("alibaba2023", data_dir=data_dir)
    meta = inst.metadata
    assert meta["num_rows_read"] == 8152
    assert meta["num_rows_read"] - meta["skipped_cpu_only"] == meta["num_jobs_in_window"]
    with (data_dir / "alibaba_gpu_2023" / "openb_node_list_gpu_node.csv").open() as f:
        gpu_nodes = [r for r in csv.DictReader(f) if int(r["gpu"]) > 0]
    assert len(inst.cluster.nodes) == len(gpu_nodes) == 1213
    assert inst.cluster.num_gpus == sum(int(r["gpu"]) for r in gpu_nodes)
    fractional = [j for j in inst.jobs if j.gpu_fraction < 1.0]
    assert fractional and all(j.num_gpus == 1 for j in fractional)
    assert set(inst.cluster.gpus_by_type()) <= {"t4", "p100", "v100", "v100-32gb", "a10"}
    spec = read_workload("alibaba2023:gpuspec33", data_dir=data_dir, max_jobs=2000)
    assert any(j.gpu_types for j in spec.jobs)


def test_unknown_workload_names_the_choices(data_dir: Path) -> None:
    with pytest.raises(ValidationError, match="^workload: 'phily' not understood"):
        read_workload("phily", data_dir=data_dir)
    with pytest.raises(ValidationError, match="muri:trace9 not known; one of muri:trace1"):
        read_workload("muri:trace9", data_dir=data_dir)
    assert "muri:trace1" in workload_names(data_dir)


def test_empty_window_is_an_error(data_dir: Path) -> None:
    with pytest.raises(ValidationError, match="no job arrives"):
        read_workload("muri:cluster", data_dir=data_dir, start_s=1e12)


def test_cli_convert(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "muri.json"
    code = main(
        [
            "instance",
            "convert",
            "muri:cluster",
            "--data-dir",
            str(data_dir),
            "--max-jobs",
            "25",
            "--cluster",
            "v100:4x8",
            "-o",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["num_jobs"] == len(load_instance(out).jobs) == 25
    assert load_instance(out).metadata["converted_by"].startswith("dltsched instance convert muri:cluster")
    assert main(["instance", "convert", "nope", "--data-dir", str(data_dir), "-o", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.slow
def test_full_philly_instance(data_dir: Path) -> None:
    inst = read_workload("philly", data_dir=data_dir)
    assert len(inst.jobs) + inst.metadata["dropped_too_large"] == 82_247


def test_cli_workloads_lists_names(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLTSCHED_DATA", str(data_dir))
    assert main(["instance", "workloads", "--names", "--json"]) == 0
    names = [row["name"] for row in json.loads(capsys.readouterr().out)["rows"]]
    assert names == list(workload_names(data_dir)) and "philly" in names and "alibaba2023" in names


@pytest.mark.data
def test_trace_freezing_rule_is_stable_and_near_its_fraction(data_dir):
    """About 30% of trace jobs allow freezing, with budgets in [0.01, 0.05], the same in every window."""
    from dltsched.instances.readers import read_workload

    big = read_workload("philly", data_dir=data_dir, max_jobs=2000, cluster="v100:16x8")
    small = read_workload("philly", data_dir=data_dir, max_jobs=500, cluster="v100:16x8")
    share = sum(j.freeze_allowed for j in big.jobs) / len(big.jobs)
    assert 0.25 < share < 0.35
    assert all(0.01 <= j.accuracy_budget <= 0.05 for j in big.jobs if j.freeze_allowed)
    assert all(j.accuracy_budget == 0.0 for j in big.jobs if not j.freeze_allowed)
    by_id = {j.id: j for j in big.jobs}
    assert all(by_id[j.id].freeze_allowed == j.freeze_allowed for j in small.jobs if j.id in by_id)
