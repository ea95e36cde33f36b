"""Copy ``dltsched profile --out`` datasets without every row that measured one of the given models.

A calibration fitted on the copy has seen no measurement of those models, so a simulation whose workload runs
only them, with the original datasets as its truth, is priced out of sample (cross-fitted by model: one fold
that holds out every model the workload runs)::

    python scripts/heldout_profiles.py --models bert_base gpt2 transformer lstm_lm \
        --out /tmp/h200-heldout "$DLTSCHED_DATA"/h200 "$DLTSCHED_DATA"/h200/mps
    dltsched calibrate /tmp/h200-heldout --out h200-heldout.json
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path


def _keep(row: dict[str, str], models: set[str]) -> bool:
    names = [v for k, v in row.items() if k == "model" or (k.startswith("model") and k[5:].isdigit())]
    return not any(n in models for n in names)


def copy_without(src: Path, dst: Path, models: set[str]) -> dict[str, int]:
    """Copy the dataset ``src`` to ``dst`` without the rows of ``models``; rows dropped per file."""
    dst.mkdir(parents=True, exist_ok=True)
    dropped = {}
    for path in sorted(src.iterdir()):
        if path.is_dir():
            continue
        if path.suffix == ".csv":
            with path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                rows = list(reader)
                fields = reader.fieldnames or []
            kept = [r for r in rows if _keep(r, models)]
            dropped[path.name] = len(rows) - len(kept)
            with (dst / path.name).open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=fields)
                writer.writeheader()
                writer.writerows(kept)
        elif path.name == "groups.json":
            data = json.loads(path.read_text())
            data["isolated"] = [r for r in data.get("isolated", []) if r.get("model") not in models]
            data["groups"] = [g for g in data.get("groups", [])
                              if not any(m.get("model") in models for m in g.get("jobs", []))]
            (dst / path.name).write_text(json.dumps(data))
        else:
            shutil.copy(path, dst / path.name)
    return dropped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    for i, src in enumerate(a.dirs):
        dst = a.out / (src.name if i == 0 else f"{src.parent.name}-{src.name}")
        print(dst, copy_without(src, dst, set(a.models)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
