"""Leave-one-model-out memory figures of each memory form, and the nested figure of choosing among them
(predictors/calibration/resources.py, MEMORY_FORMS), on profile datasets of one GPU.

    python scripts/memory_forms.py "$DLTSCHED_DATA"/h200 [--json]
    python scripts/memory_forms.py "$DLTSCHED_DATA"/lucid --gpu v100-32gb

Every fit uses the isolated runs of every dataset found (as `dltsched calibrate` does); the rows scored are
those of the `--sharing` datasets (time-slicing by default: the calibrate report's rows). Nested: for each
held-out model the form is chosen by leave-one-model-out on the other models alone, fitted on them, and
scores the held-out model; the plain per-form figures are optimistic for whichever form one picks on them.
The calibration fits one form whatever the data (resources.MEMORY_FORM), so its own leave-one-model-out
figure is the one an unseen job gets from it; the nested figure is what choosing among the forms on the
data would give.
"""

from __future__ import annotations

import argparse
import json
import statistics

from dltsched.predictors.calibration import resources
from dltsched.predictors.calibration.data import read_datasets
from dltsched.predictors.calibration.model import fitted_and_scored_rows


def _mape(apes: dict[str, list[float]]) -> float:
    return statistics.fmean(a for v in apes.values() for a in v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--sharing", default="timeslice")
    parser.add_argument("--gpu", default=None, help="the GPU of Lucid-layout datasets, e.g. v100-32gb")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    datasets = read_datasets(args.dirs, args.gpu)
    gpu = datasets[0].gpu
    rows, scored = fitted_and_scored_rows(datasets, args.sharing)
    out: dict[str, object] = {"gpu": gpu, "rows_fitted": sum(1 for r in rows if r.gmem_mib),
                              "rows_scored": sum(1 for r in scored if r.gmem_mib),
                              "shipped_form": resources.MEMORY_FORM}
    out["lomo_per_form"] = {f: _mape(resources.memory_lomo_apes(rows, f, scored))
                            for f in resources.MEMORY_FORMS}
    apes, picks = resources.memory_nested_lomo_apes(rows, tuple(resources.MEMORY_FORMS), scored)
    out["nested"] = {"mape": _mape(apes), "forms": list(resources.MEMORY_FORMS),
                     "per_model_mape": {m: statistics.fmean(v) for m, v in apes.items()}, "picks": picks}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{gpu}: {out['rows_fitted']} rows fitted, {out['rows_scored']} scored ({args.sharing})")
    for f, mape in out["lomo_per_form"].items():  # type: ignore[attr-defined]
        print(f"  LOMO, form {f:<20} memory MAPE {mape:5.1f}%")
    nested = out["nested"]
    print(f"  nested LOMO over {len(resources.MEMORY_FORMS)} forms    memory MAPE {nested['mape']:5.1f}%")  # type: ignore[index]
    for m, pick in nested["picks"].items():  # type: ignore[index]
        print(f"    {m:<14} {nested['per_model_mape'][m]:5.1f}%  chose {pick}")  # type: ignore[index]


if __name__ == "__main__":
    main()
