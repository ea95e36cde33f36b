"""``dltsched profile --out``: co-located profiling (CPU smoke with real worker processes) and its dataset."""

from __future__ import annotations

import csv
import json

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.predictors.profiling.colocate import ProfiledJob, parse_group
from dltsched.predictors.profiling.session import catalog_gpu, sample_groups

pytest.importorskip("torch")


def _run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def smoke_dataset(tmp_path_factory):
    """One smoke session (3 isolated jobs, one pair, one triple): spawn overhead paid once for all checks."""
    out = tmp_path_factory.mktemp("profiled")
    code = main(["profile", "--smoke", "--groups", "neumf:8+a2c:8", "--groups", "neumf:8+a2c:8+pointnet:8",
                 "--out", str(out), "--json"])
    assert code == 0
    return out


def test_smoke_writes_every_file(smoke_dataset):
    names = {p.name for p in smoke_dataset.iterdir()}
    assert names == {"steptime.csv", "single_data.csv", "colocate_info.csv", "colocate3_info.csv",
                     "groups.json", "measurement.json", "MEASUREMENT.md"}


def test_isolated_csv_reads_with_eval_steptime(smoke_dataset, tmp_path, capsys):
    from dltsched.predictors.steptime.measurements import read_csv

    rows = read_csv(smoke_dataset / "steptime.csv")
    assert {(m.model, m.batch_size, m.gpu) for m in rows} == {("neumf", 2, "cpu"), ("a2c", 2, "cpu"),
                                                             ("pointnet", 2, "cpu")}
    assert all(m.step_time_s > 0 for m in rows)
    # the CPU has no step-time model, so relabel it as a catalog GPU to run the evaluator end to end
    as_gpu = tmp_path / "as_v100.csv"
    as_gpu.write_text((smoke_dataset / "steptime.csv").read_text().replace(",cpu,", ",v100,"))
    code, out, _err = _run(capsys, "predict", "eval-steptime", str(as_gpu), "--json")
    assert code == 0 and json.loads(out)["n"] == 3


def test_pairs_read_with_lucid_reader(smoke_dataset):
    from dltsched.predictors.colocation.samples import read_lucid_samples

    data = read_lucid_samples(smoke_dataset / "colocate_info.csv")
    assert len(data) == 1 and {j.model for j in data.samples[0].jobs} == {"neumf", "a2c"}
    assert all(s > 0 for s in data.samples[0].speeds)
    assert len(data.isolated) == 3  # single_data.csv beside it: every isolated job


def test_triples_and_groups_json(smoke_dataset):
    with (smoke_dataset / "colocate3_info.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert [row[f"model{i}"] for i in (1, 2, 3)] == ["neumf", "a2c", "pointnet"]  # as given
    assert row["gpu_util"] == "nan" and row["sharing"] == "timeslice"  # no NVML on CPU
    groups = json.loads((smoke_dataset / "groups.json").read_text())["groups"]
    assert [len(g["jobs"]) for g in groups] == [2, 3]
    job = groups[1]["jobs"][0]
    assert job["speed"] == pytest.approx(job["isolated_step_time_s"] / job["step_time_s"])
    # no NVML on a CPU: no utilisation window to hold, so every job's window is exactly the rule's 3 steps,
    # however late the parent process gets to run
    assert all(len(j["step_times_s"]) == 3 for g in groups for j in g["jobs"])


def test_measurement_record(smoke_dataset):
    record = json.loads((smoke_dataset / "measurement.json").read_text())
    assert record["device"] == "cpu" and record["smoke"] is True and record["torch"]
    assert {"date_utc", "host", "command", "driver", "cuda", "gpu", "nvml"} <= set(record)
    # the utilisation window's minimum, 3 s and 15 NVML samples (the timed windows run on until then)
    assert record["util_min_window_s"] == 3.0 and record["util_min_samples"] == 15
    assert "| torch |" in (smoke_dataset / "MEASUREMENT.md").read_text()


def test_without_cuda_not_smoke_is_a_clear_error(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    code, _out, err = _run(capsys, "profile", "--colocate", "2", "--model", "neumf", "--out", str(tmp_path))
    assert code != 0 and "no CUDA GPU found" in err and "--smoke" in err


def test_mps_without_binary_is_a_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _out, err = _run(capsys, "profile", "--smoke", "--sharing", "mps", "--groups", "neumf:2+a2c:2",
                           "--out", str(tmp_path / "d"))
    assert code != 0 and "nvidia-cuda-mps-control' not found" in err


def test_groups_need_out_and_valid_text(capsys):
    code, _out, err = _run(capsys, "profile", "--smoke", "--groups", "neumf:2+a2c:2")
    assert code != 0 and "--out DIR" in err
    with pytest.raises(ValueError, match="write model:batch_size"):
        parse_group("resnet18+lstm_lm:20")
    assert parse_group("resnet18:64+lstm_lm:20") == (ProfiledJob("resnet18", 64), ProfiledJob("lstm_lm", 20))


def test_sample_groups_is_seeded_and_sized():
    jobs = tuple(ProfiledJob(m, 8) for m in ("a2c", "neumf", "dqn"))
    pairs = sample_groups(jobs, 2, 4, seed=1)
    assert pairs == sample_groups(jobs, 2, 4, seed=1) and len(pairs) == 4 and all(len(g) == 2 for g in pairs)
    assert len(sample_groups(jobs, 3, 100, seed=0)) == 10  # every multiset of 3 out of 3 jobs
    with pytest.raises(ValueError, match="must be 2 or 3"):
        sample_groups(jobs, 4, 1, seed=0)


@pytest.mark.parametrize(("name", "gpu"),
                         [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
                                           ("Tesla V100-SXM2-16GB", "v100"), ("Mystery GPU", "mystery gpu")])
def test_catalog_gpu(name, gpu):
    assert catalog_gpu(name) == gpu


@pytest.mark.gpu
def test_colocated_pair_on_gpu(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    code = main(["profile", "--groups", "resnet18:32+neumf:256", "--steps", "10", "--warmup", "3",
                 "--out", str(tmp_path)])
    record = json.loads((tmp_path / "measurement.json").read_text())
    assert code == 0 and record["device"] == "cuda" and record["cuda"]
    groups = json.loads((tmp_path / "groups.json").read_text())["groups"]
    assert groups[0]["gmem"] > 0 and all(0 < j["speed"] < 1.5 for j in groups[0]["jobs"])
    # utilisation rests on a window of a second or more (NVML's samples inside it, or the polled mean)
    rows = [*json.loads((tmp_path / "groups.json").read_text())["isolated"], *groups]
    assert all(r["util_source"] in ("nvml_samples", "polled") and r["util_samples"] >= 1 for r in rows)
    assert all(r["util_window_s"] >= (0.16 if r["util_source"] == "nvml_samples" else 1.0) for r in rows)


def test_unknown_model_is_one_clear_line(capsys, tmp_path):
    code, _, err = _run(capsys, "profile", "--smoke", "--job", "nosuchnet:8", "--out", str(tmp_path / "d"))
    assert code == 2
    assert "nosuchnet" in err and "Traceback" not in err


class _FailingPool:
    """Stands in for a WorkerPool: fails the jobs named in ``fail``, times out on ``hang``."""

    def __init__(self, fail=(), hang=()):
        self.fail, self.hang, self.asked = set(fail), set(hang), []

    def measure(self, jobs, *, warmup, steps, util_window_s, util_samples):
        # the session asks for a utilisation window of 3 s and 15 NVML samples
        assert (util_window_s, util_samples) == (3.0, 15)
        from dltsched.engine.domain.errors import DltschedError
        from dltsched.predictors.profiling.colocate import WorkerTimeout

        label = "+".join(j.label for j in jobs)
        self.asked.append(label)
        if label in self.hang:
            raise WorkerTimeout("profile: no 'result' from the workers in 1 s")
        if label in self.fail:
            raise DltschedError(f"profile: worker failed: {label}: OutOfMemoryError")
        return "measured"


def test_session_records_failures_and_stops_on_a_timeout(tmp_path):
    from dltsched.predictors.profiling.session import ProfileSession

    session = ProfileSession(tmp_path, "timeslice", True, 3, 1, None)
    pool = _FailingPool(fail={"a:1"}, hang={"c:1"})
    jobs = [ProfiledJob("a", 1), ProfiledJob("b", 1), ProfiledJob("c", 1), ProfiledJob("d", 1)]
    got = [session.measure(pool, (j,)) for j in jobs]
    assert got == [None, "measured", None, None]
    assert [f["group"]
            for f in session.failed] == ["a:1"] and "OutOfMemoryError" in session.failed[0]["error"]
    assert session.stopped is not None and session.stopped.startswith("c:1")
    assert pool.asked == ["a:1", "b:1", "c:1"]  # nothing is asked of a pool after a timeout


def test_spent_budget_starts_no_measurement(tmp_path):
    from dltsched.predictors.profiling.session import ProfileSession

    session = ProfileSession(tmp_path, "timeslice", True, 3, 1, deadline=0.0)
    pool = _FailingPool()
    assert session.measure(pool, (ProfiledJob("a", 1),)) is None
    assert pool.asked == [] and session.stopped == "budget spent before a:1"


def test_explicit_jobs_and_failed_list_in_the_dataset(capsys, tmp_path):
    out = tmp_path / "d"
    code, stdout, _ = _run(capsys, "profile", "--smoke", "--job", "neumf:64", "--job", "a2c:16", "--budget",
                           "600", "--out", str(out), "--json")
    assert code == 0
    result = json.loads(stdout)
    assert {r["model"] for r in result["isolated"]} == {"neumf", "a2c"}
    assert {r["batch_size"] for r in result["isolated"]} == {2}  # smoke runs shrink every batch
    assert result["failed"] == [] and result["stopped"] is None
    record = json.loads((out / "measurement.json").read_text())
    assert record["failed"] == [] and record["stopped"] is None


def test_steptime_csv_carries_scope_n_and_interval(smoke_dataset):
    from dltsched.predictors.steptime.measurements import read_csv

    with (smoke_dataset / "steptime.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["scope"] for r in rows} == {"compute"} and {r["n"] for r in rows} == {"3"}
    assert {r["stop"] for r in rows} == {"steps"}  # smoke: a fixed window
    # no NVML on a CPU smoke run: the utilisation-window columns are there, unmeasured
    assert {(r["util_source"], r["util_samples"], r["util_window_s"]) for r in rows} == {("nan",) * 3}
    assert {m.scope for m in read_csv(smoke_dataset / "steptime.csv")} == {"compute"}


def test_record_names_the_command_as_typed(smoke_dataset):
    record = json.loads((smoke_dataset / "measurement.json").read_text())
    assert record["command"].startswith("dltsched profile --smoke --groups neumf:8+a2c:8")
    assert record["scope"] == "compute" and record["precision"] is None  # smoke: a fixed window
