"""Every notebook executes (papermill, small parameters, in a temp dir) and writes its figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltsched.instances.datadir import find_data_dir

papermill = pytest.importorskip("papermill")

HAS_DATA = find_data_dir(required=False) is not None

#: notebook -> (small parameters, figures it must write)
CASES = {
    "ablation": ({"table_csv": "", "tiny_jobs": 6}, ["ablation_changes"]),
    "policy_comparison": ({"instance_path": "../instances/examples/tiny-6jobs-4gpus.json",
                           "policies": ["fifo", "sjf", "dltsched:greedy"],
                           "philly_jobs": 20 if HAS_DATA else 0, "philly_policies": ["fifo", "sjf"],
                           "time_limit_s": 2.0},
                          ["jct_cdf", "utilization",
                           "gantt_dltsched_greedy"] + (["philly_jct_cdf"] if HAS_DATA else [])),
    "predictor_accuracy": ({"max_pairs": 40},
                           ["steptime_pred_vs_measured", "colocation_pred_vs_measured"] if HAS_DATA else []),
    "solver_scaling": ({"sizes": [[6, 8], [12, 8]], "backends": ["greedy", "cpsat"], "time_limit_s": 2.0},
                       ["solve_scaling"]),
    "freezing_ablation": ({"num_jobs": 8, "num_gpus": 4, "time_limit_s": 1.0, "backend": "greedy"},
                          ["freezing_avg_jct", "freezing_jct_cdf", "freezing_gantt"]),
    "crossfit_evaluation": ({"live_jobs": 20 if HAS_DATA else 0, "live_policies": ["fifo", "sjf"]},
                            ["crossfit_avg_jct", "crossfit_gain", "crossfit_diagnosis",
                             "crossfit_variants"] + (["live_avg_jct"] if HAS_DATA else [])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_notebook_executes_and_writes_figures(name, repo_root, tmp_path):
    params, figures = CASES[name]
    notebooks = repo_root / "notebooks"
    out = tmp_path / "figures"
    papermill.execute_notebook(str(notebooks / f"{name}.ipynb"), str(tmp_path / f"{name}.ipynb"),
                               parameters=params | {"output_dir": str(out)}, cwd=str(notebooks),
                               kernel_name="python3", progress_bar=False)
    written = {p.stem: p.stat().st_size for p in out.glob("*.png")}
    assert set(figures) <= set(written), f"missing figures: {set(figures) - set(written)}"
    assert all(size > 0 for size in written.values())
    executed = (tmp_path / f"{name}.ipynb").read_text()
    assert not figures or '"image/png"' in executed, "figures must show inline, not only in files"


#: figures each stored notebook shows inline at its own parameters (executed with the shared data folder)
STORED_FIGURES = {"policy_comparison": 4, "predictor_accuracy": 3, "solver_scaling": 1,
                  "freezing_ablation": 3, "crossfit_evaluation": 4, "ablation": 1}
#: the most a stored notebook may weigh (figures as PNG at a modest resolution)
MAX_STORED_BYTES = 1_500_000


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb")),
                         ids=lambda p: p.stem)
def test_notebooks_are_stored_executed_with_figures_inline(path):
    """Stored as run (``scripts/execute_notebooks.py``): every code cell executed once, top to bottom, in one
    kernel; no error; the figures inline as PNG; small enough to keep in the repository."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert all(isinstance(n, int)
               for n in counts) and counts == list(range(counts[0], counts[0] + len(code))), \
        "execute every cell in order (scripts/execute_notebooks.py)"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], "a stored cell failed"
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= STORED_FIGURES[path.stem], f"{len(images)} inline figures"
    assert not [o for o in outputs if "image/svg+xml" in o.get("data", {})], "store figures as PNG"
    assert path.stat().st_size <= MAX_STORED_BYTES
    text = "".join(o.get("text", "") for o in outputs)
    assert "/tmp/" not in text and "Traceback" not in text
    assert any("parameters" in c.metadata.get("tags", []) for c in code), "needs a 'parameters' cell"
    assert path.stem in CASES, "add the notebook to CASES so the suite executes it"


def test_notebooks_use_no_deprecated_api():
    import nbformat

    for path in sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb")):
        source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert "SolveConfig" not in source, f"{path.name} uses the deprecated SolveConfig"
