"""Instance format v1: round trip, every validation error kind, schema file up to date."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dltsched.engine.domain.errors import ValidationError
from dltsched.instances.generator import GeneratorSpec, generate_instance
from dltsched.instances.schema import (
    dumps_instance,
    instance_to_dict,
    json_schema,
    load_instance,
    save_instance,
    shipped_schema_path,
)


def _base() -> dict[str, Any]:
    return {
        "format": "dltsched-instance",
        "version": 1,
        "name": "t",
        "cluster": {
            "nodes": [
                {"id": "a", "gpu_type": "v100", "num_gpus": 4},
                {"id": "b", "gpu_type": "K80", "num_gpus": 2, "network_gbps": 25},
            ]
        },
        "jobs": [
            {"id": "j0", "model": "ResNet-18", "batch_size": 32, "total_iterations": 100},
            {
                "id": "j1",
                "model": "bert",
                "batch_size": 8,
                "num_gpus": 2,
                "epochs": 2,
                "iterations_per_epoch": 50,
                "arrival_time_s": 10,
                "amp": True,
                "optimizer": "adamw",
                "freeze_allowed": True,
                "accuracy_budget": 0.02,
                "deadline_s": 5000,
                "gpu_types": ["v100"],
                "hyperparameters": {"lr": 0.001, "schedule": "cosine"},
                "duration_hint_s": 60,
            },
        ],
    }


def test_load_resolves_aliases_and_epochs() -> None:
    inst = load_instance(_base())
    assert inst.jobs[0].model == "resnet18"
    assert inst.cluster.nodes[1].gpu_type == "k80"
    assert inst.jobs[1].total_iterations == 100  # 2 epochs x 50
    assert inst.jobs[1].hyperparameter("schedule") == "cosine"
    assert inst.cluster.num_gpus == 6


def test_round_trip_dict_and_file(tmp_path: Path) -> None:
    inst = load_instance(_base())
    data = instance_to_dict(inst)
    assert load_instance(data) == inst
    assert instance_to_dict(load_instance(data)) == data
    path = save_instance(inst, tmp_path / "sub" / "x.json")
    assert load_instance(path) == inst
    assert path.read_text() == dumps_instance(load_instance(path))


def test_custom_gpu_type_is_refused_naming_it() -> None:
    """The predictors and the simulator price catalog GPU types only: a custom one is refused at load, by the
    same check ``simulate`` runs, rather than accepted and failing later."""
    raw = _base()
    raw["cluster"]["gpu_types"] = [
        {
            "id": "mygpu",
            "name": "My GPU",
            "architecture": "x",
            "memory_gib": 20,
            "memory_bandwidth_gbs": 500,
            "fp32_tflops": 10,
            "fp16_tensor_tflops": 40,
            "sm_count": 40,
            "interconnect": "pcie",
            "intra_node_bandwidth_gbs": 16,
        }
    ]
    raw["cluster"]["nodes"].append({"id": "c", "gpu_type": "mygpu", "num_gpus": 1})
    with pytest.raises(ValidationError,
                       match=r"^cluster.gpu_types\[0\].id: custom GPU type 'mygpu' cannot be"):
        load_instance(raw)


def test_round_trip_generated() -> None:
    inst = generate_instance(GeneratorSpec(num_jobs=30, num_gpus=8, seed=3))
    assert load_instance(json.loads(dumps_instance(inst))) == inst


def _broken(edit: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(_base())
    *parents, last = edit.split("/")
    node: Any = raw
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return raw


_DELETE = "<delete>"

# (edit path, new value, expected error path, text the message must contain)
CASES = [
    ("jobs/1/num_gpus", 0, "jobs[1].num_gpus", "0 not understood; must be >= 1"),
    ("jobs/0/batch_size", "abc", "jobs[0].batch_size", "'abc' not understood; must be an integer"),
    ("jobs/0/batch_size", 3.5, "jobs[0].batch_size", "must be an integer"),
    ("jobs/0/amp", "yes", "jobs[0].amp", "must be true or false"),
    ("jobs/0/arrival_time_s", -1, "jobs[0].arrival_time_s", "must be >= 0"),
    ("jobs/0/accuracy_budget", 1.5, "jobs[0].accuracy_budget", "must be < 1"),
    ("jobs/0/gpu_fraction", 0, "jobs[0].gpu_fraction", "must be > 0"),
    ("jobs/0/model", "resnet-181", "jobs[0].model", "did you mean"),
    ("jobs/0/gpu_types", ["v1000"], "jobs[0].gpu_types[0]", "unknown GPU type"),
    ("jobs/0/optimizer", "adagradx", "jobs[0].optimizer", "one of"),
    ("jobs/0/total_iterations", _DELETE, "jobs[0].total_iterations", "give total_iterations, or epochs"),
    ("jobs/1/total_iterations", 5, "jobs[1].total_iterations", "give only one of them"),
    ("jobs/0/num_gpu", 2, "jobs[0].num_gpu", "did you mean 'num_gpus'"),
    ("jobs/1/hyperparameters/lr", [1], "jobs[1].hyperparameters.lr", "must be a number or a string"),
    ("jobs/0/id", "j1", "jobs[1].id", "duplicate job id 'j1'"),
    ("jobs/1/num_gpus", 8, "jobs[1].num_gpus", "larger than the cluster"),
    ("cluster/nodes/0/num_gpus", 1, "jobs[1].num_gpus", "GPUs of type v100"),
    ("jobs/0/id", _DELETE, "jobs[0].id", "missing"),
    ("jobs", [], "jobs", "at least 1 item"),
    ("cluster/nodes/0/gpu_type", "v10", "cluster.nodes[0].gpu_type", "did you mean"),
    ("cluster/nodes/1/id", "a", "cluster.nodes[1].id", "duplicate node id"),
    ("cluster/nodes/0/num_gpus", "4", "cluster.nodes[0].num_gpus", "must be an integer"),
    ("cluster/nodes/0/network_gbps", float("nan"), "cluster.nodes[0].network_gbps", "must be finite"),
    ("format", "other", "format", "must be 'dltsched-instance'"),
    ("version", 2, "version", "reads version 1"),
    ("name", "", "name", "non-empty"),
]


@pytest.mark.parametrize(("edit", "value", "path", "text"), CASES, ids=[f"{c[0]}={c[1]!r}" for c in CASES])
def test_validation_errors_name_the_field(edit: str, value: Any, path: str, text: str) -> None:
    with pytest.raises(ValidationError) as info:
        load_instance(_broken(edit, value))
    assert info.value.path == path
    assert text in str(info.value)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"{path}: ")


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "format": "dltsched-instance",\n  "version": 1\n  "name": "x"\n}\n')
    with pytest.raises(ValidationError, match=r"malformed JSON at line 4, column 3"):
        load_instance(bad)


def test_top_level_must_be_object(tmp_path: Path) -> None:
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValidationError, match="must be a JSON object"):
        load_instance(bad)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_instance(tmp_path / "nope.json")


def test_shipped_schema_is_up_to_date() -> None:
    shipped = json.loads(shipped_schema_path().read_text())
    assert shipped == json_schema(), (
        "regenerate: dltsched instance schema -o instances/schema/instance-v1.schema.json"
    )


def test_schema_describes_the_job_fields() -> None:
    job = json_schema()["$defs"]["JobModel"]
    assert {"id", "model", "batch_size", "total_iterations", "epochs", "gpu_fraction"} <= set(
        job["properties"]
    )
    assert job["additionalProperties"] is False
    assert len(job["oneOf"]) == 2


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), num_jobs=st.integers(1, 12), num_gpus=st.integers(1, 12))
def test_round_trip_property(seed: int, num_jobs: int, num_gpus: int) -> None:
    inst = generate_instance(GeneratorSpec(num_jobs=num_jobs, num_gpus=num_gpus, seed=seed))
    text = dumps_instance(inst)
    assert load_instance(json.loads(text)) == inst
    assert dumps_instance(load_instance(json.loads(text))) == text
