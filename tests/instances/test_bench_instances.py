"""Speed figures (pytest-benchmark): full Philly -> Instance, validating a 10,000-job instance.

Run: ``pytest tests/instances/test_bench_instances.py -m slow --benchmark-only``. Targets: Philly < 5 s,
10k-job validation < 1 s; the tests assert results, never times.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dltsched.instances.generator import GeneratorSpec, generate_instance
from dltsched.instances.readers import read_workload
from dltsched.instances.readers.philly import philly_rows
from dltsched.instances.schema import instance_to_dict, load_instance

pytestmark = [pytest.mark.slow, pytest.mark.data]


def test_bench_read_full_philly(benchmark: Any, data_dir: Path) -> None:
    inst = benchmark.pedantic(
        read_workload,
        args=("philly",),
        kwargs={"data_dir": data_dir},
        setup=philly_rows.cache_clear,
        rounds=3,
        iterations=1,
    )
    assert len(inst.jobs) + inst.metadata["dropped_too_large"] == 82_247


def test_bench_validate_10k_jobs(benchmark: Any, data_dir: Path) -> None:
    raw = json.loads(
        json.dumps(
            instance_to_dict(
                generate_instance(
                    GeneratorSpec(num_jobs=10_000, num_gpus=256, gpus_per_node=8, arrival_rate_per_h=600.0)
                ),
            )
        )
    )
    inst = benchmark.pedantic(load_instance, args=(raw,), rounds=5, iterations=1)
    assert len(inst.jobs) == 10_000
