"""One validator: ``instance validate`` refuses exactly what ``simulate`` and ``solve`` refuse, with the same
line (custom GPU types, a catalog type redefined, ids given twice, unknown datasets, keys given twice), and
``instance generate`` never writes a file ``validate`` refuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dltsched.engine.app.cli.main import main
from dltsched.engine.domain.errors import ValidationError
from dltsched.instances.schema import load_instance

TINY = Path(__file__).parents[2] / "instances" / "examples" / "tiny-4jobs-2gpus.json"
X1 = {"id": "x1", "name": "X1", "architecture": "hopper", "memory_gib": 80.0, "memory_bandwidth_gbs": 3000.0,
      "fp32_tflops": 60.0, "fp16_tensor_tflops": 900.0, "sm_count": 132, "interconnect": "nvlink",
      "intra_node_bandwidth_gbs": 900.0}
V100 = {"id": "v100", "name": "NVIDIA Tesla V100 16GB (SXM2)", "architecture": "volta", "memory_gib": 16,
        "memory_bandwidth_gbs": 900, "fp32_tflops": 15.7, "fp16_tensor_tflops": 125, "sm_count": 80,
        "interconnect": "nvlink2", "intra_node_bandwidth_gbs": 150}


def _base() -> dict[str, Any]:
    return json.loads(TINY.read_text())


def _custom_type() -> dict[str, Any]:
    raw = _base()
    raw["cluster"]["gpu_types"] = [X1]
    raw["cluster"]["nodes"][0]["gpu_type"] = "x1"
    return raw


def _v100_with_1_gib() -> dict[str, Any]:
    raw = _base()
    raw["cluster"]["gpu_types"] = [{**V100, "memory_gib": 1.0}]
    return raw


def _custom_type_twice() -> dict[str, Any]:
    raw = _custom_type()
    raw["cluster"]["gpu_types"] = [X1, copy.deepcopy(X1)]
    return raw


def _unknown_dataset() -> dict[str, Any]:
    raw = _base()
    raw["jobs"][0]["dataset"] = "nope"
    return raw


CASES = {
    "custom-gpu-type": (_custom_type, "cluster.gpu_types[0].id: custom GPU type 'x1' cannot be scheduled"),
    "v100-redefined": (_v100_with_1_gib,
                       "cluster.gpu_types[0]: redefines catalog GPU type 'v100': memory_gib 1.0"),
    "type-twice": (_custom_type_twice, "cluster.gpu_types[1].id: duplicate GPU type id or alias 'x1'"),
    "dataset-nope": (_unknown_dataset, "jobs[0].dataset: 'nope' not known for model 'transformer'"),
}


def _line(argv: list[str], capsys: Any) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_simulate_and_solve_refuse_alike(name: str, tmp_path: Path, capsys: Any) -> None:
    make, expected = CASES[name]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(make()))
    lines = {}
    for argv in (["instance", "validate", str(path)],
                 ["simulate", "--instance", str(path), "--policy", "fifo", "--predictors", "analytic"],
                 ["solve", str(path), "--predictors", "analytic"]):
        code, line = _line(argv, capsys)
        assert code == 2, (argv, line)
        assert len(line.splitlines()) == 1
        lines[argv[0]] = line
    assert expected in lines["instance"], lines["instance"]
    assert lines["instance"] == lines["simulate"] == lines["solve"]


def test_a_catalog_copy_is_harmless() -> None:
    raw = _base()
    raw["cluster"]["gpu_types"] = [V100]
    assert load_instance(raw).cluster.gpu_types["v100"].memory_gib == 16


def test_a_key_given_twice_is_refused_with_its_path(tmp_path: Path, capsys: Any) -> None:
    text = TINY.read_text().replace('"batch_size": 128', '"batch_size": 128, "batch_size": 64')
    path = tmp_path / "twice.json"
    path.write_text(text)
    code, line = _line(["instance", "validate", str(path)], capsys)
    assert code == 2
    assert line == f"error: jobs[0].batch_size: given twice in one object; give each key once (in {path})"
    top = tmp_path / "top.json"
    top.write_text('{"name": "a", ' + TINY.read_text().strip()[1:])
    with pytest.raises(ValidationError, match=r"^name: given twice"):
        load_instance(top)


@pytest.mark.parametrize(("argv", "option"), [
    (["--cluster", "v100:1x2000"], "--cluster"),
    (["--name", "a\nb"], "--name"),
])
def test_generate_never_writes_what_validate_refuses(argv: list[str], option: str, tmp_path: Path,
                                                     capsys: Any) -> None:
    out = tmp_path / "g.json"
    code, line = _line(["instance", "generate", *argv, "-o", str(out)], capsys)
    assert code == 2
    assert line.startswith(f"error: {option}: the instance it makes is not valid"), line
    assert not out.exists()
    code, _ = _line(["instance", "generate", "--jobs", "5", "-o", str(out)], capsys)
    assert code == 0 and load_instance(out).name
