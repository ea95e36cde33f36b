"""``dltsched plot``: standard figures from simulate, accuracy and bench-solve results."""

from __future__ import annotations

import json

import pytest

from dltsched.engine.app.api import simulate_instance
from dltsched.engine.app.cli.main import main
from dltsched.engine.app.plots import (
    figures_for,
    plot_gantt,
    plot_pred_vs_measured,
    plot_solve_scaling,
    render,
)


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


def _bars(fig):
    """(height, hatched) of every Gantt bar of the figure's first axes."""
    return [(round(path.get_extents().height, 3), bool(c.get_hatch())) for c in fig.axes[0].collections
            for path in c.get_paths()]


def test_gantt_rows_are_labelled_and_colocated_jobs_share_lanes_while_they_overlap():
    result = {"policy": "p", "placements": [
        {"job_id": "a", "gpus": [0], "start_s": 0.0, "end_s": 3600.0, "freeze_level": 0},
        {"job_id": "b", "gpus": [0], "start_s": 1800.0, "end_s": 7200.0, "freeze_level": 2},
        {"job_id": "c", "gpus": [0, 1], "start_s": 7200.0, "end_s": 9000.0, "freeze_level": 0}]}
    fig = plot_gantt(result, gpu_types=["v100", "k80", "k80"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["GPU 0 · v100", "GPU 1 · k80", "GPU 2 · k80"]
    heights = sorted(h for h, _ in _bars(fig))
    assert heights == [0.42, 0.42, 0.84, 0.84]  # a and b overlap: two lanes; c alone: the whole row, twice
    assert sum(hatched for _, hatched in _bars(fig)) == 1  # the frozen job
    labels = {t.get_text() for t in ax.texts}
    assert {"a", "b f2", "c"} <= labels  # job ids on bars, freeze level on the frozen one
    assert ax.get_xscale() == "linear" and "(min)" in ax.get_xlabel() and "first arrival" in ax.get_xlabel()


def test_gantt_puts_a_long_tail_on_a_log_axis_and_short_runs_in_minutes():
    body = [{"job_id": f"j{i}", "gpus": [i % 4], "start_s": 600.0 * i, "end_s": 600.0 * i + 900.0}
            for i in range(20)]
    tail = [{"job_id": "long", "gpus": [1], "start_s": 12000.0, "end_s": 80000.0}]
    fig = plot_gantt({"policy": "p", "placements": body + tail, "gpu_types": ["v100"] * 4})
    assert fig.axes[0].get_xscale() == "symlog" and "log scale after" in fig.axes[0].get_xlabel()
    short = plot_gantt({"policy": "p", "placements": body[:8]})
    assert short.axes[0].get_xscale() == "linear" and "(min)" in short.axes[0].get_xlabel()
    assert [t.get_text() for t in short.axes[0].get_yticklabels()] == [f"GPU {g}" for g in range(4)]


def test_simulation_figures_share_one_time_origin(sim_file):
    results = json.loads(sim_file.read_text())
    results[1]["utilization"] = [[t + 500.0, u] for t, u in results[1]["utilization"]]  # a later first sample
    figs = figures_for(results)
    util = figs["utilization"]
    assert len(util.axes) == 2  # one panel per policy
    starts = [min(line.get_xdata()[0] for line in ax.get_lines()) for ax in util.axes]
    assert starts[0] == pytest.approx(0.0) and starts[1] > 0  # both measured from the first arrival
    assert util.axes[1].get_xlabel() == figs["gantt_fifo"].axes[0].get_xlabel().split(";")[0]
    assert all(len(ax.get_lines()) == 2 for ax in util.axes)  # raw trace and its moving average


def test_solver_scaling_puts_objective_and_gap_beside_time():
    rows = [{"size": "20x16", "backend": "cpsat", "solve_time_s": 0.1, "build_time_s": 0.01, "objective": 3.0,
             "gap": 0.0},
            {"size": "200x256", "backend": "cpsat", "solve_time_s": 2.0, "build_time_s": 0.3,
             "objective": 30.0, "gap": 0.02},
            {"size": "200x256", "backend": "milp", "solve_time_s": 5.0, "objective": 29.0, "gap": None}]
    fig = plot_solve_scaling(rows)
    time_ax, objective_ax, gap_ax = fig.axes[:3]
    assert [ax.get_ylabel() for ax in fig.axes[:3]] == ["time (s, log scale)", "objective",
                                                        "relative gap (%)"]
    assert all(ax.get_xscale() == "log" for ax in fig.axes[:3]) and time_ax.get_yscale() == "log"
    assert list(gap_ax.get_lines()[0].get_ydata()) == [0.0, 2.0]  # percent; milp gave no gap
    assert len(objective_ax.get_lines()) == 2


def test_pred_vs_measured_is_log_log_with_held_out_points_marked():
    rows = [{"predicted": 1.1, "measured": 1.0, "group": "a", "held_out": "1"},
            {"predicted": 9.0, "measured": 10.0, "group": "a", "held_out": "0"},
            {"predicted": 120.0, "measured": 100.0, "group": "b", "held_out": "true"}]
    fig = plot_pred_vs_measured(rows, quantity="step time (s)")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "measured step time (s) (log scale)"
    labels = [c.get_label() for c in ax.collections if "MAPE" in c.get_label()]
    assert labels == ["a, held out: MAPE 10.0% (n=1)", "a, fitted on: MAPE 10.0% (n=1)",
                      "b, held out: MAPE 20.0% (n=1)"]
    filled = [len(c.get_facecolor()) > 0 and c.get_facecolor()[0][3] > 0 for c in ax.collections
              if "MAPE" in c.get_label()]
    assert filled == [True, False, True]  # held out filled, fitted on hollow
    linear = plot_pred_vs_measured([{"predicted": 0.0, "measured": 1.0}])  # zero: no log axis
    assert linear.axes[0].get_xscale() == "linear"
    (unmarked,) = [c.get_label() for c in linear.axes[0].collections if "MAPE" in c.get_label()]
    assert unmarked == "all: MAPE 100.0% (n=1)"  # no held_out field: no claim either way


def test_experiment_results_render(tmp_path):
    run = {"policy": "fifo", "seed": 0, "records": [{"job_id": "a", "jct_s": 10.0, "arrival_s": 0.0}],
           "utilization": [[0.0, 1.0], [10.0, 0.0]], "gpu_util": 1.0,
           "placements": [{"job_id": "a", "gpus": [1], "start_s": 0.0, "end_s": 10.0}]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"summary": [], "runs": [run, run | {"seed": 1}],
                                "gpu_types": ["v100", "p100"]}))
    figs = figures_for(json.loads(path.read_text()))
    assert set(figs) == {"jct_cdf", "utilization", "gantt_fifo"}
    assert [t.get_text()
            for t in figs["gantt_fifo"].axes[0].get_yticklabels()] == ["GPU 0 · v100", "GPU 1 · p100"]
    assert len(render(path, tmp_path / "figs")) == 3


def test_bad_results_exit_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    assert main(["plot", str(bad), "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: RESULT")
    assert main(["plot", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(ValueError, match="placements"):
        figures_for([{"policy": "x", "avg_jct_s": 1.0, "placements": []}])


def _eval_steptime_payload() -> dict:
    """``predict eval-steptime --leave-one-gpu-out --json`` in miniature: two GPUs, two models, APEs worked
    out (k80: 50% and 10% off, MAPE 30%; v100: 0% and 20% off, MAPE 10%)."""
    rows = [("k80", "resnet18", 1.5, 1.0), ("k80", "lstm", 0.9, 1.0), ("v100", "resnet18", 0.5, 0.5),
            ("v100", "lstm", 0.24, 0.2)]
    return {"n": 4, "mape": 20.0, "oracle_mape": 15.0, "per_gpu": {},
            "rows": [{"model": m, "gpu": g, "batch_size": 32, "predicted_s": p, "measured_s": t,
                      "ape": 100 * abs(p - t) / t} for g, m, p, t in rows]}


def test_plot_draws_eval_steptime_output(tmp_path, capsys):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(_eval_steptime_payload()))
    assert main(["plot", str(path), "-o", str(tmp_path / "fig"), "--json"]) == 0
    names = sorted(f["path"].rsplit("/", 1)[-1] for f in json.loads(capsys.readouterr().out)["files"])
    assert names == ["error_by_gpu_and_model.png", "pred_vs_measured.png"]
    figs = figures_for(_eval_steptime_payload())
    per_gpu, per_model = figs["error_by_gpu_and_model"].axes
    widths = {t.get_text(): round(p.get_width(), 6)
              for t, p in zip(per_gpu.get_yticklabels(), per_gpu.patches,
                                                                      strict=True)}
    assert widths == {"k80": 30.0, "v100": 10.0}
    widths = {t.get_text(): round(p.get_width(), 6)
              for t, p in zip(per_model.get_yticklabels(), per_model.patches,
                                                                      strict=True)}
    assert widths == {"resnet18": 25.0, "lstm": 15.0}
    legend = [t.get_text() for t in figs["pred_vs_measured"].axes[0].get_legend().get_texts()]
    assert "k80, held out: MAPE 30.0% (n=2)" in legend  # leave-one-GPU-out rows are predictions, marked so
    from dltsched.engine.app.plots.common import pyplot

    pyplot().close("all")


def test_plot_draws_eval_colocation_output(tmp_path, capsys):
    from click.testing import CliRunner

    from dltsched.engine.app.cli.colocation import eval_colocation

    (tmp_path / "single_data.csv").write_text(
        "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,gpu\n"
        "resnet18,cifar10,32,0,1600,40,10,2000,h100\nvgg16,cifar10,64,0,1280,50,10,2500,h100\n")
    (tmp_path / "colocate_info.csv").write_text(
        ",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,"
        "gpu_util,gmem_util,gmem,gpu,sharing,gmem_source\n"
        "0,vgg16,cifar10,1,64,0,0.5,resnet18,cifar10,1,32,0,0.6,85,9,5000,h100,timeslice,nvml\n")
    result = CliRunner().invoke(eval_colocation,
                                [str(tmp_path / "colocate_info.csv"), "--format", "lucid", "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output[result.output.index("{"):])
    speed = [r for r in scores["rows"] if r["quantity"] == "speed"]
    assert sorted(r["measured"] for r in speed) == [0.5, 0.6] and {r["gpu"] for r in speed} == {"h100"}
    mape = 100 * sum(abs(r["predicted"] - r["measured"]) / r["measured"] for r in speed) / 2
    assert mape == pytest.approx(scores["speed_mape"])  # the rows are what the score was computed on
    path = tmp_path / "coloc.json"
    path.write_text(json.dumps(scores))
    written = {p.name for p in render(path, tmp_path / "fig")}
    assert written == {f"{kind}_{q}.png" for kind in ("pred_vs_measured", "error_by_gpu_and_model")
                       for q in ("speed", "memory_mib", "gpu_util")}


def test_plot_reads_simulate_json_rows(tmp_path, capsys, repo_root):
    out = tmp_path / "sim.json"
    assert main(["simulate", "--instance", str(repo_root / "instances/examples/tiny-6jobs-4gpus.json"),
                 "--policy", "fifo", "--policy", "sjf", "--predictors", "analytic", "--records", "-o",
                 str(out)]) == 0
    capsys.readouterr()
    names = {p.name for p in render(out, tmp_path / "fig")}
    assert names == {"jct_cdf.png", "utilization.png", "gantt_fifo.png", "gantt_sjf.png"}


@pytest.mark.parametrize(("payload", "field"), [
    ({"rows": [{"policy": "x", "avg_jct_s": 1.0, "records": "abc"}]}, "rows[0].records"),
    ({"rows": "abc"}, "rows"),
    ([{"policy": "x", "avg_jct_s": 1.0, "records": [{"jct_s": "soon", "arrival_s": 0}]}],
     "RESULT[0].records[0].jct_s"),
    ({"policy": "x", "avg_jct_s": 1.0, "placements": [{"gpus": [0], "start_s": 0, "end_s": 1}]},
     "placements[0].job_id"),
    ({"rows": [{"predicted_s": 1.0, "measured_s": "x"}]}, "rows[0]"),
    ({"rows": [{"predicted": 1.0, "measured": 2.0}, 7]}, "rows[1]"),
    ({"runs": "abc", "summary": []}, "runs"),
])
def test_malformed_results_exit_2_naming_the_field(payload, field, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(payload))
    assert main(["plot", str(bad), "-o", str(tmp_path / "fig")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: ") and err.count("\n") == 1 and "internal error" not in err, err
