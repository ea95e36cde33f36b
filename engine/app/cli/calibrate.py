"""``dltsched calibrate DIR... --out CAL.json``: what profiles of a GPU teach, as one bundle (CPU only)."""

from __future__ import annotations

from typing import Any

import click

from dltsched.engine.app.cli.main import emit, json_text
from dltsched.engine.domain.errors import write_text_file

_ROWS = (("isolated_lomo", "step_time_s", "step time (jobs never profiled)"),
         ("isolated_lojo", "step_time_s", "step time (job never profiled, its model was)"),
         ("isolated_lomo", "memory_mib", "memory alone"),
         ("isolated_lomo", "gpu_util", "utilisation alone"),
         ("groups_lomo", "speed", "co-location speed (model never profiled)"),
         ("groups_logo", "speed", "co-location speed (group never measured)"),
         ("groups_lomo", "memory_mib", "group memory (model never profiled)"),
         ("groups_logo", "memory_mib", "group memory (group never measured)"),
         ("groups_lomo", "gpu_util", "group utilisation (model never profiled)"),
         ("groups_logo", "gpu_util", "group utilisation (group never measured)"))
_METHODS = ("calibrated", "default", "constant", "per_model_mean", "per_family_mean", "roofline",
            "util_share", "calibrated_no_model_scale")


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _points(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def _print(bundle: dict[str, Any], out: str) -> None:
    click.echo(f"calibration -> {out}")
    if not bundle.get("shippable", True):
        restricted = "; ".join(bundle.get("restricted_by", []))
        click.echo(f"NOT SHIPPABLE: fitted on {restricted}; keep it out of any release and any repository")
    for gpu, entry in bundle["gpus"].items():
        groups = ", ".join(f"{n} {mode}" for mode, n in entry["groups"].items())
        click.echo(f"{gpu}: {entry['jobs_alone']} jobs alone, groups: {groups or 'none'}")
        for mode, fig in entry.get("figures", {}).items():
            methods = [m for m in _METHODS if any(f"{m}_mape" in got for part, what, _ in _ROWS
                                                  for got in [fig.get(part, {}).get(what) or {}])]
            click.echo(f"  {mode}: MAPE, cross-validated ({fig['models']} models)  "
                       + "  ".join(f"{m:>14}" for m in methods))
            for part, what, label in _ROWS:
                if what == "gpu_util" and part == "isolated_lomo":
                    label = f"{label} ({entry.get('utilisation_form', 'power')} form)"
                got = fig.get(part, {}).get(what)
                if got:
                    cells = "  ".join(f"{_pct(got.get(f'{m}_mape')):>14}" for m in methods)
                    click.echo(f"    {label:<44} n={got['n']:<3} {cells}")
                if got and any(f"{m}_weighted_mape" in got for m in methods):
                    cells = "  ".join(f"{_pct(got.get(f'{m}_weighted_mape')):>14}" for m in methods)
                    click.echo(f"    {'  weighted by measurement spread':<44} n={got['n']:<3} {cells}")
                if what == "gpu_util" and part == "isolated_lomo" and got:
                    cells = "  ".join(f"{_points(got.get(f'{m}_mean_abs_points')):>14}" for m in methods)
                    click.echo(f"    {'  mean absolute error (points)':<44} n={got['n']:<3} {cells}")
                    cells = "  ".join(f"{_pct(got.get(f'{m}_median_ape')):>14}" for m in methods)
                    click.echo(f"    {'  median APE':<44} n={got['n']:<3} {cells}")


@click.command("calibrate")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="The calibration bundle to write (JSON), e.g. h200.json; use it with --calibration.")
@click.option("--sharing", type=click.Choice(["timeslice", "mps"]), default=None,
              help="Only the datasets of this sharing mode (default: every mode found, each fitted apart).")
@click.option("--figures/--no-figures", default=True, show_default=True,
              help="Cross-validate (leave one model out, leave one group out) beside the default and "
                   "simple rules.")
@click.option("--gpu", default=None,
              help="The GPU of datasets that do not record theirs (Lucid's layout), e.g. v100-32gb.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole bundle as JSON.")
def calibrate(dirs: tuple[str, ...], out: str, sharing: str | None, figures: bool, gpu: str | None,
              as_json: bool) -> None:
    """Fit step time, memory, utilisation and co-location of every GPU and sharing mode measured in the
    'dltsched profile --out' datasets under DIRS (Gavel's throughput file or its folder, and Lucid's folder
    with --gpu, read too; an eval-steptime CSV, e.g. from 'predict convert-steptime zeus', adds jobs alone),
    and write one calibration bundle with its data, what was fitted and cross-validated figures. A bundle
    fitted on Lucid's data (non-commercial licence) is marked not shippable.

    \b
    dltsched calibrate profiles/h200 --out h200.json
    dltsched simulate --instance ... --calibration h200.json
    """
    from dltsched.predictors.calibration.bundle import calibrate as fit

    bundle = fit(dirs, figures=figures, sharing=sharing, gpu=gpu)
    write_text_file(out, json_text(bundle) + "\n", option="--out")
    emit(bundle, as_json, lambda: _print(bundle, out))
