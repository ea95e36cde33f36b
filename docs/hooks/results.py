"""MkDocs hook: the page of stored simulation runs, generated from the result files in ``notebooks/results``.

A page holding the marker ``<!-- stored-runs -->`` gets, per result file, the workloads it ran and one table:
each (window, predictor bundle and recipe, policy, settings) with its seeds, mean average JCT and mean
makespan, and the command of its first run. Nothing is typed by hand, so the page cannot drift from the files.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "notebooks" / "results"
MARKER = "<!-- stored-runs -->"


def _windows(meta: dict[str, Any]) -> dict[str, str]:
    for key in ("windows", "workloads"):
        if isinstance(meta.get(key), dict):
            return {k: str(v) for k, v in meta[key].items()}
    return {}


def _settings(row: dict[str, Any]) -> str:
    text = " ".join(str(row.get(k) or "") for k in ("options", "settings")).strip()
    return text.replace("|", "\\|")


def _hours(values: list[float]) -> str:
    return f"{statistics.fmean(values) / 3600.0:.3f}"


def render_file(path: Path) -> str:
    """One result file as Markdown: its workloads and one table row per group of runs that differ by seed."""
    data = json.loads(path.read_text())
    meta, rows = data.get("meta", {}), data.get("rows", [])
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        key = (str(row.get("window", "")), str(row.get("predictors", "")),
               str(row.get("predictors_recipe") or ""), str(row.get("policy", "")), _settings(row))
        groups[key].append(row)
    lines = [f"### {len(rows)} runs", ""]
    windows = _windows(meta)
    if not windows and meta.get("window"):
        lines += [f"Workload: {meta['window']}.", ""]
    used = sorted({k[0] for k in groups})
    for name in used:
        if name in windows:
            lines.append(f"- `{name}`: {windows[name]}")
    lines += ["", "| window | predictors | policy | settings | seeds | avg JCT (h) | makespan (h) |",
              "|---|---|---|---|---|---|---|"]
    for (window, bundle, recipe, policy, settings), runs in sorted(groups.items()):
        seeds = ",".join(str(r.get("seed")) for r in sorted(runs, key=lambda r: r.get("seed", 0)))
        label = f"{bundle} ({recipe})" if recipe else bundle
        jct, makespan = _hours([r["avg_jct_s"] for r in runs]), _hours([r["makespan_s"] for r in runs])
        lines.append(f"| {window} | {label} | {policy} | {settings} | {seeds} | {jct} | {makespan} |")
    return "\n".join(lines) + "\n"


def render_all(folder: Path = RESULTS) -> str:
    files = sorted(folder.glob("*.json"))
    if not files:
        return "No stored result files.\n"
    return "\n".join(render_file(p) for p in files)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render_all())
