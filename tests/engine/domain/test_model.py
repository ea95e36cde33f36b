"""Domain types validate in their constructors and errors name the field."""

from __future__ import annotations

import pytest

from dltsched.engine.domain.errors import ValidationError
from dltsched.engine.domain.model import Assignment, Cluster, Instance, Job, Node, Plan


def test_cluster_indexes_gpus_node_by_node():
    c = Cluster((Node("a", "V100-16GB", 2), Node("b", "k80", 3)))
    assert c.num_gpus == 5
    assert [c.gpu_type_of(g) for g in range(5)] == ["v100", "v100", "k80", "k80", "k80"]
    assert list(c.node_gpus(1)) == [2, 3, 4]
    assert c.gpus_by_type() == {"v100": 2, "k80": 3}


def test_model_alias_resolves_to_canonical_id():
    assert Job("x", "ResNet-50", 32, 10).model == "resnet50"


@pytest.mark.parametrize(("kwargs", "path"), [
    ({"batch_size": 0}, "batch_size"),
    ({"num_gpus": 0}, "num_gpus"),
    ({"total_iterations": -1}, "total_iterations"),
    ({"arrival_time_s": -5}, "arrival_time_s"),
    ({"accuracy_budget": 1.5}, "accuracy_budget"),
    ({"model": "resnet5"}, "model"),
    ({"gpu_fraction": 0.5, "num_gpus": 2}, "gpu_fraction"),
    ({"optimizer": "lbfgsx"}, "optimizer"),
])
def test_bad_job_fields_name_the_field(kwargs, path):
    base = {"id": "j", "model": "resnet18", "batch_size": 32, "total_iterations": 100}
    with pytest.raises(ValidationError) as err:
        Job(**(base | kwargs))
    assert err.value.path == path
    assert str(err.value).startswith(f"{path}: ")


def test_unknown_gpu_lists_close_matches():
    with pytest.raises(ValidationError, match="did you mean") as err:
        Cluster((Node("a", "v10", 1),))
    assert err.value.path == "cluster.nodes[0].gpu_type"


def test_instance_rejects_duplicates_and_jobs_larger_than_cluster():
    c = Cluster((Node("a", "v100", 4),))
    with pytest.raises(ValidationError, match="duplicate job id"):
        Instance("i", c, (Job("a", "resnet18", 32, 1), Job("a", "resnet18", 32, 1)))
    with pytest.raises(ValidationError, match="larger than the cluster") as err:
        Instance("i", c, (Job("a", "resnet18", 32, 1, num_gpus=8),))
    assert err.value.path == "jobs[0].num_gpus"


def test_plan_groups_and_duplicate_placement():
    plan = Plan((Assignment("a", (0, 1)), Assignment("b", (1,))))
    assert plan.colocation_groups() == {0: ("a",), 1: ("a", "b")}
    with pytest.raises(ValidationError, match="more than once"):
        Plan((Assignment("a", (0,)), Assignment("a", (1,))))
