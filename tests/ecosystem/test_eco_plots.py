"""``dltsched plot``: standard figures from simulate, accuracy and bench-solve results."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.api import simulate_instance
from dltsched.engine.cli import main
from dltsched.engine.plots import figures_for, plot_gantt, render


@pytest.fixture(scope="module")
def sim_file(instance_dir, tmp_path_factory):
    results = [simulate_instance(instance_dir / "eco-0.json", p).to_dict(records=True, utilization=True)
               for p in ("fifo", "gandiva")]
    path = tmp_path_factory.mktemp("sim") / "sim.json"
    path.write_text(json.dumps(results))
    return path


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_plot_cli_writes_every_simulation_figure(sim_file, tmp_path, capsys, fmt):
    assert main(["plot", str(sim_file), "-o", str(tmp_path), "--format", fmt, "--json"]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    names = {f["path"].rsplit("/", 1)[-1] for f in files}
    assert names == {f"{n}.{fmt}" for n in ("jct_cdf", "utilization", "gantt_fifo", "gantt_gandiva")}
    assert all((tmp_path / n).stat().st_size > 0 for n in names)


def test_accuracy_and_scaling_figures(tmp_path):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("predicted,measured,group\n1.0,1.1,resnet\n2.0,1.8,resnet\n3.0,3.3,lstm\n")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": [
        {"size": "20x16", "backend": "cpsat", "solve_time_s": 0.1, "build_time_s": 0.01},
        {"size": "200x256", "backend": "cpsat", "solve_time_s": 2.0, "build_time_s": 0.3}]}))
    (acc,) = render(pairs, tmp_path / "a")
    (scale,) = render(bench, tmp_path / "b", "svg")
    assert acc.name == "pred_vs_measured.png" and acc.stat().st_size > 0
    assert scale.name == "solve_scaling.svg" and scale.stat().st_size > 0


def test_gantt_stacks_colocated_jobs_in_one_row():
    result = {"policy": "p", "placements": [
        {"job_id": "a", "gpus": [0], "start_s": 0.0, "end_s": 3600.0, "freeze_level": 0},
        {"job_id": "b", "gpus": [0], "start_s": 1800.0, "end_s": 7200.0, "freeze_level": 2}]}
    fig = plot_gantt(result)
    bars = [c for c in fig.axes[0].collections]
    heights = sorted(round(b.get_paths()[0].get_extents().height, 3) for b in bars)
    assert heights == [0.4, 0.4]  # two lanes of half the row height: co-located
    assert any(b.get_hatch() for b in bars)  # the frozen job is hatched


def test_bad_results_exit_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    assert main(["plot", str(bad), "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: RESULT")
    assert main(["plot", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(ValueError, match="placements"):
        figures_for([{"policy": "x", "avg_jct_s": 1.0, "placements": []}])
