"""Synthetic generator: determinism, shape of the workload, cluster specs; shipped examples."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.instances.clusters import (
    default_cluster_for,
    format_cluster_spec,
    mixed_cluster,
    parse_cluster_spec,
)
from dltsched.instances.generator import GAVEL_JOB_TYPES, GeneratorSpec, generate_instance
from dltsched.instances.readers.gavel_throughputs import parse_job_type
from dltsched.instances.schema import dumps_instance, load_instance

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "instances" / "examples").glob("*.json"))


def test_same_seed_same_json_other_seed_differs() -> None:
    spec = GeneratorSpec(num_jobs=40, num_gpus=12, seed=7)
    assert dumps_instance(generate_instance(spec)) == dumps_instance(generate_instance(spec))
    other = GeneratorSpec(num_jobs=40, num_gpus=12, seed=8)
    assert dumps_instance(generate_instance(other)) != dumps_instance(generate_instance(spec))


def test_generated_workload_shape() -> None:
    inst = generate_instance(GeneratorSpec(num_jobs=400, num_gpus=16, seed=1, arrival_rate_per_h=60.0))
    jobs = inst.jobs
    assert inst.cluster.gpus_by_type() == {"v100": 8, "p100": 4, "k80": 4}
    arrivals = [j.arrival_time_s for j in jobs]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    # 400 Poisson arrivals at 60/h span about 400 minutes
    assert 4.5 * 3600 < arrivals[-1] < 8.5 * 3600
    single = sum(j.num_gpus == 1 for j in jobs) / len(jobs)
    assert 0.6 < single < 0.8
    assert max(j.num_gpus for j in jobs) <= 8
    known = {(t.model, t.batch_size) for t in map(parse_job_type, GAVEL_JOB_TYPES)}
    assert {(j.model, j.batch_size) for j in jobs} <= known
    durations = [j.duration_hint_s for j in jobs]
    assert all(d is not None and 300 <= d <= 4 * 3600 for d in durations)
    assert all(j.total_iterations >= 1 for j in jobs)
    freezable = [j for j in jobs if j.freeze_allowed]
    assert 0.2 < len(freezable) / len(jobs) < 0.4
    assert all(0.01 <= j.accuracy_budget <= 0.05 for j in freezable)


def test_gavel_job_types_name_the_models_their_scripts_train() -> None:
    # Gavel's "Recommendation" workload trains Recoder's item autoencoder, not NeuMF
    models = {parse_job_type(label).model for label in GAVEL_JOB_TYPES}
    assert models == {"resnet18", "resnet50", "transformer", "lstm_lm", "recoder", "a3c", "cyclegan"}
    jt = parse_job_type("Recommendation (batch size 4096)")
    assert (jt.model, jt.batch_size, jt.dataset) == ("recoder", 4096, "ml-20m")
    jobs = generate_instance(GeneratorSpec(num_jobs=200, num_gpus=16, seed=3)).jobs
    recommendation = [j for j in jobs if j.model == "recoder"]
    assert recommendation and all(j.optimizer == "adam" and j.dataset == "ml-20m" for j in recommendation)


def test_generator_caps_job_size_to_cluster() -> None:
    inst = generate_instance(GeneratorSpec(num_jobs=200, cluster="v100:1x2,k80:1x1", seed=2))
    assert max(j.num_gpus for j in inst.jobs) == 2


def test_generated_by_reproduces_instance() -> None:
    spec = GeneratorSpec(num_jobs=5, cluster="v100:1x2", seed=4, name="x")
    inst = generate_instance(spec)
    assert inst.metadata["generated_by"] == spec.command()
    assert "--cluster v100:1x2" in spec.command() and "--gpus " not in spec.command()


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_jobs", 0), ("arrival_rate_per_h", 0.0), ("max_duration_s", 100.0), ("freeze_fraction", 1.5)],
)
def test_generator_spec_rejects_bad_values(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=f"^{field}: "):
        GeneratorSpec(**{field: value})


def test_cluster_spec_parser_round_trip() -> None:
    cluster = parse_cluster_spec("v100:2x4, p100:1x8@25,Tesla-K80:1x2")
    assert cluster.gpus_by_type() == {"v100": 8, "p100": 8, "k80": 2}
    assert [n.id for n in cluster.nodes] == ["v100-0", "v100-1", "p100-0", "k80-0"]
    assert cluster.nodes[2].network_gbps == 25.0
    assert format_cluster_spec(cluster) == "v100:2x4,p100:1x8@25,k80:1x2"


@pytest.mark.parametrize(
    ("spec", "path", "text"),
    [
        ("", "cluster", "must be TYPE:NODESxGPUS"),
        ("v100:8", "cluster[0]", "must be TYPE:NODESxGPUS"),
        ("v100:1x8,v1000:1x8", "cluster[1]", "did you mean"),
        ("v100:0x8", "cluster[0]", "must be >= 1"),
    ],
)
def test_cluster_spec_errors(spec: str, path: str, text: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_cluster_spec(spec)
    assert info.value.path == path and text in str(info.value)


def test_mixed_cluster_deals_types_round_robin() -> None:
    cluster = mixed_cluster(18, ("v100", "p100", "k80"), 4)
    assert [n.gpu_type for n in cluster.nodes] == ["v100", "p100", "k80", "v100", "p100"]
    assert cluster.num_gpus == 18 and cluster.nodes[-1].num_gpus == 2


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shipped_examples_are_valid_and_record_their_command(path: Path) -> None:
    inst = load_instance(path)
    command = inst.metadata["generated_by"]
    assert command.startswith("dltsched instance generate ")
    assert shlex.split(command)[-1] == f"instances/examples/{path.name}"


def test_default_example_matches_the_demo_brief() -> None:
    inst = load_instance(EXAMPLES[[p.name for p in EXAMPLES].index("default.json")])
    assert 50 <= len(inst.jobs) <= 70
    assert inst.cluster.gpus_by_type() == {"v100": 8, "p100": 4, "k80": 4}
    assert max(j.arrival_time_s for j in inst.jobs) < 3 * 3600


@pytest.mark.data
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shipped_examples_regenerate_identically(
    path: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dltsched.engine.app.cli.main import main

    inst = load_instance(path)
    args = shlex.split(inst.metadata["generated_by"])[1:]
    out = tmp_path / "instances" / "examples" / path.name
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DLTSCHED_DATA", str(data_dir))
    assert main([*args[:-1], str(out.relative_to(tmp_path))]) == 0
    assert out.read_text() == path.read_text()


def test_default_cluster_hosts_largest_job_and_mean_demand() -> None:
    # mean demand 100 GPUs over 3 types -> 34 per type, rounded up to whole 8-GPU nodes (40)
    assert default_cluster_for(16, 100.0).gpus_by_type() == {"v100": 40, "p100": 40, "k80": 40}
    # a tiny workload still gets one 8-GPU node per type; a 32-GPU job gets 32 of each type
    assert default_cluster_for(1, 0.5).gpus_by_type() == {"v100": 8, "p100": 8, "k80": 8}
    assert default_cluster_for(32, 1.0).max_gpus_of_type("k80") == 32
