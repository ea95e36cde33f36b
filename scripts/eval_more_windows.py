"""The remaining evaluation runs: Muri's traces, the 10,000-job Philly window at 256 GPUs, batch makespan.

Every run is one ``dltsched simulate`` process (the command is stored with its row), so any row can be
re-run by hand. Rows go to ``notebooks/results/more_windows.json`` as they finish; a row already there
(same part, window, bundle, policy, variant and seed) is not run again, so the script resumes.

Parts (``--part``, repeatable):

* ``muri``: Muri's trace1 at 96 GPUs (v100:4x8,p100:4x8,k80:4x8) and trace3 at 48 GPUs
  (v100:4x8,p100:1x8,k80:1x8), every baseline and the optimizing policy; crossfit for all, default
  (in-sample) for the optimizing policy and the best baselines.
* ``muriw``: the same two traces cut in thirds (by job count; each third converted with ``--start-s`` at its
  first job's submit time and ``--max-jobs``), the replicates behind the intervals: Muri's traces name their
  models and the simulator has no noise, so ``--seed`` changes no row (checked on trace3, seeds 0 and 1).
* ``p256``: the 10,000-job Philly window from 4,055,952 s at 256 GPUs (v100:11x8,p100:11x8,k80:10x8),
  crossfit, one instance per seed (the seed draws the models, as in the 1,000-job windows).
* ``batch``: batch arrivals (every job at time 0), makespan: FIFO and the optimizing policy's makespan
  configurations (``objective=effective_progress``, without and with ``length_weight=1``: longest first) on
  the default instance and on the 64-GPU Philly window (1,000 jobs, models drawn per seed), crossfit and
  default.

Usage::

    python scripts/eval_more_windows.py --part muri --seeds 0 1 2 --parallel 2
    python scripts/eval_more_windows.py --summary        # means and 95% intervals of what is stored
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "notebooks" / "results" / "more_windows.json"
WORK = Path(os.environ.get("DLTSCHED_EVAL_DIR", Path(tempfile.gettempdir()) / "dltsched-more-windows"))
CLI = [sys.executable, "-m", "dltsched.engine.app.cli.main"]

BASELINES = ("fifo", "sjf", "tiresias", "gandiva")
PAPERS = ("isacpp", "icefrog", "lucid", "gavel")
ALL = (*BASELINES, *PAPERS, "optimizing")
METRICS = ("avg_jct_s", "makespan_s", "median_jct_s", "p99_jct_s", "gpu_util", "num_jobs_finished")


@dataclass(frozen=True)
class Window:
    """One instance: how it is converted (``{seed}`` in ``convert`` is the seed)."""

    name: str
    describe: str
    convert: tuple[str, ...]
    per_seed: bool = False

    def path(self, seed: int) -> Path:
        return WORK / (f"{self.name}_s{seed}.json" if self.per_seed else f"{self.name}.json")

    def command(self, seed: int) -> list[str]:
        return [*CLI, "instance", "convert", *(a.format(seed=seed) for a in self.convert), "-o",
                str(self.path(seed))]


WINDOWS = {
    "muri1": Window("muri1", "Muri trace1 (1,494 jobs), 96 GPUs (v100:4x8,p100:4x8,k80:4x8)",
                    ("muri:trace1", "--cluster", "v100:4x8,p100:4x8,k80:4x8")),
    "muri3": Window("muri3", "Muri trace3 (992 jobs), 48 GPUs (v100:4x8,p100:1x8,k80:1x8)",
                    ("muri:trace3", "--cluster", "v100:4x8,p100:1x8,k80:1x8")),
    **{f"muri{t}{'abc'[i]}": Window(
        f"muri{t}{'abc'[i]}", f"Muri trace{t}, jobs {i * size + 1}-{min(n, (i + 1) * size)} of {n} (from "
                              f"{start:,.0f} s), "
        f"{gpus} GPUs ({spec})", (f"muri:trace{t}", "--start-s", f"{start:.0f}", "--max-jobs", str(size),
                                  "--cluster", spec))
       for t, n, size, gpus, spec, starts in (
           (1, 1494, 498, 96, "v100:4x8,p100:4x8,k80:4x8", (0.0, 5321027.0, 7360462.0)),
           (3, 992, 331, 48, "v100:4x8,p100:1x8,k80:1x8", (0.0, 2191769.0, 4942249.0)))
       for i, start in enumerate(starts)},
    "p256": Window("p256", "Philly, 10,000 jobs from 4,055,952 s, 256 GPUs (v100:11x8,p100:11x8,k80:10x8)",
                   ("philly", "--start-s", "4055952", "--max-jobs", "10000", "--cluster",
                    "v100:11x8,p100:11x8,k80:10x8", "--seed", "{seed}"), per_seed=True),
    "dflt": Window("dflt", "instances/examples/default.json (60 jobs, 16 GPUs), every job at time 0", ()),
    "p64batch": Window("p64batch",
                       "Philly, 1,000 jobs from 4,055,952 s, 64 GPUs (v100:3x8,p100:3x8,k80:2x8), every "
                       "job at time 0 (--arrivals batch)",
                       ("philly", "--start-s", "4055952", "--max-jobs", "1000", "--cluster",
                        "v100:3x8,p100:3x8,k80:2x8", "--seed", "{seed}"), per_seed=True),
}


@dataclass(frozen=True)
class Run:
    part: str
    window: str
    predictors: str
    policy: str
    seed: int
    variant: str = ""
    settings: tuple[str, ...] = field(default=())

    def key(self) -> tuple[str, str, str, str, str, int]:
        return (self.part, self.window, self.predictors, self.policy, self.variant, self.seed)

    def instance(self) -> Path:
        if self.window == "dflt":
            return ROOT / "instances" / "examples" / "default.json"
        return WINDOWS[self.window].path(self.seed)

    def command(self, out: Path) -> list[str]:
        return [*CLI, "simulate", "--instance", str(self.instance()), "--policy", self.policy,
                "--seed", str(self.seed), "--predictors", self.predictors, *self.settings, "--json", "-o",
                str(out)]


MAKESPAN_VARIANTS: dict[str, tuple[str, ...]] = {
    "effective_progress": ("--option", "objective=effective_progress"),
    "lpt": ("--option", "objective=effective_progress", "--option", "length_weight=1"),
    "lpt_w2": ("--option", "objective=effective_progress", "--option", "length_weight=2"),
    "lpt_profiled": ("--option", "objective=effective_progress", "--option", "length_weight=1",
                     "--profile-on-arrival", "300"),
}


def planned(part: str, seeds: list[int], policies: list[str]) -> Iterator[Run]:
    """The runs of one part, cheapest first within each seed."""
    if part == "muri":
        for seed in seeds:
            for window in ("muri3", "muri1"):
                for policy in policies:
                    yield Run(part, window, "crossfit", policy, seed)
                for policy in ("optimizing", "tiresias", "gandiva", "sjf", "gavel"):
                    if policy in policies:
                        yield Run(part, window, "default", policy, seed)
    # thirds of each trace: the replicates (Muri names its models, so seeds change nothing)
    elif part == "muriw":
        for window in ("muri3a", "muri3b", "muri3c", "muri1a", "muri1b", "muri1c"):
            for policy in policies:
                yield Run(part, window, "crossfit", policy, 0)
            for policy in ("optimizing", "tiresias"):
                if policy in policies:
                    yield Run(part, window, "default", policy, 0)
    elif part == "p256":
        for seed in seeds:
            for policy in policies:
                yield Run(part, "p256", "crossfit", policy, seed)
    elif part == "batch":
        for seed in seeds:
            for window in ("dflt", "p64batch"):
                for bundle in ("crossfit", "default"):
                    yield Run(part, window, bundle, "fifo", seed, settings=("--arrivals", "batch"))
                    for variant, opts in MAKESPAN_VARIANTS.items():
                        yield Run(part, window, bundle, "optimizing", seed, variant,
                                  ("--arrivals", "batch", *opts))
    else:
        raise SystemExit(f"--part: '{part}' not known; one of muri, muriw, p256, batch")


def load() -> dict:
    if RESULTS.exists():
        return json.loads(RESULTS.read_text())
    return {"meta": {}, "rows": []}


def _key(row: dict) -> tuple:
    return (row["part"], row["window"], row["predictors"], row["policy"], row["variant"], row["seed"])


def store(row: dict) -> None:
    """Add ``row`` to the results file (under a lock: several runs of this script may share it)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = load()
        data["rows"] = [r for r in data["rows"] if _key(r) != _key(row)] + [row]
        save(data)


def save(data: dict) -> None:
    data["meta"] = {
        "windows": {k: w.describe for k, w in WINDOWS.items()},
        "convert": {k: " ".join(["dltsched instance convert", *w.convert, "-o",
                                 w.path(0).name.replace("_s0", "_sSEED")])
                    for k, w in WINDOWS.items() if w.convert},
        "bundles": {"default": "in-sample: fitted on the truth's measurements",
                    "crossfit": "out-of-fold by model (predictors/crossfit.py)"},
        "script": "scripts/eval_more_windows.py",
    }
    tmp = RESULTS.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(RESULTS)


def ensure_instance(run: Run) -> None:
    if run.window == "dflt":
        return
    window = WINDOWS[run.window]
    path = window.path(run.seed)
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run(window.command(run.seed), check=True, capture_output=True, env=_env())


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DLTSCHED_DATA", str(ROOT.parent / "shared" / "data"))
    return env


def execute(run: Run) -> dict:
    ensure_instance(run)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        started = time.perf_counter()
        proc = subprocess.run(["nice", "-n", "10", *run.command(out)], capture_output=True, text=True,
                              env=_env())
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"{run}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        result = json.loads(out.read_text())
    result = result[0] if isinstance(result, list) else result
    cmd = " ".join(["dltsched",
                    *run.command(Path("OUT.json"))[len(CLI):]]).replace(str(WORK) + "/", "").replace(
        str(ROOT) + "/", "")
    return {"part": run.part, "window": run.window, "predictors": run.predictors,
            "predictors_fit": "in-sample" if run.predictors == "default" else "out-of-fold by model",
            "policy": run.policy, "variant": run.variant, "settings": " ".join(run.settings),
            "seed": run.seed, **{m: result.get(m) for m in METRICS}, "simulate_s": round(wall, 1),
            "command": cmd}


def run_all(runs: list[Run], parallel: int) -> None:
    data = load()
    done = {_key(r) for r in data["rows"]}
    todo = [r for r in runs if r.key() not in done]
    print(f"{len(todo)} runs to do ({len(runs) - len(todo)} stored)", flush=True)
    for r in {(r.window, r.seed) for r in todo}:  # convert serially: instance files are shared
        ensure_instance(Run("", r[0], "", "", r[1]))

    lock = threading.Lock()

    def one(run: Run) -> None:
        try:
            row = execute(run)
        except RuntimeError as err:
            print(f"FAILED {err}", flush=True)
            return
        with lock:
            store(row)
        print(f"{run.window} {run.predictors} {run.policy} {run.variant} s{run.seed}: avg JCT "
              f"{row['avg_jct_s'] / 3600:.3f} h, makespan {row['makespan_s'] / 3600:.2f} h "
              f"({row['simulate_s']} s)",
              flush=True)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(one, todo))


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% t-interval (0 for one value)."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, float(stats.t.ppf(0.975,
                                   len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)))


def summary(metric: str) -> None:
    rows = load()["rows"]
    groups: dict[tuple[str, str, str, str], dict[int, float]] = {}
    for r in rows:
        groups.setdefault((r["window"], r["predictors"], r["policy"], r["variant"]),
                          {})[r["seed"]] = r[metric]
    for window in dict.fromkeys(r["window"] for r in rows):
        print(f"== {window} ({metric}, hours; mean ± 95% half-width; relative: paired per seed)")
        for (w, bundle, policy, variant), by_seed in sorted(groups.items()):
            if w != window:
                continue
            mean, half = interval([v / 3600 for v in by_seed.values()])
            line = f"  {bundle:8s} {policy:10s} {variant:18s} n={len(by_seed)} {mean:9.3f} ± {half:.3f}"
            ref = groups.get((w, bundle, "fifo", ""), {})
            seeds = sorted(set(by_seed) & set(ref))
            if seeds and policy != "fifo":
                m, h = interval([100 * (by_seed[s] / ref[s] - 1) for s in seeds])
                line += f"   vs fifo {m:+.1f} ± {h:.1f}%"
            print(line)


#: replicate groups: name -> (windows, by): rows of these windows are replicates by seed or by window
GROUPS = {
    "muri1-thirds": (("muri1a", "muri1b", "muri1c"), "window"),
    "muri3-thirds": (("muri3a", "muri3b", "muri3c"), "window"),
    "muri1": (("muri1",), "seed"),
    "muri3": (("muri3",), "seed"),
    "p256": (("p256",), "seed"),
}


def compare(metric: str = "avg_jct_s") -> dict:
    """Per replicate group and bundle: each policy's mean and 95% interval (hours), and the optimizing
    policy's paired relative difference to the best of FIFO/SJF/Tiresias/Gandiva and to the best of the
    papers' policies (best per replicate)."""
    rows = [r for r in load()["rows"] if r["variant"] == ""]
    out: dict = {}
    for group, (windows, by) in GROUPS.items():
        for bundle in ("crossfit", "default"):
            table: dict[str, dict] = {}
            for r in rows:
                if r["window"] in windows and r["predictors"] == bundle:
                    rep = r["window"] if by == "window" else r["seed"]
                    table.setdefault(r["policy"], {})[rep] = r[metric]
            if "optimizing" not in table:
                continue
            entry: dict = {"policies": {p: dict(zip(("mean_h", "ci95_h"),
                                                    interval([v / 3600 for v in t.values()]),
                                                     strict=True)) | {"n": len(t)} for p, t in table.items()}}
            for name, pool in (("best_greedy", BASELINES), ("best_paper", PAPERS)):
                reps = [k for k in table["optimizing"] if all(k in table.get(p, {}) for p in pool)]
                if not reps:
                    continue
                rel = [100 * (table["optimizing"][k] / min(table[p][k] for p in pool) - 1) for k in reps]
                best = [min(pool, key=lambda p, k=k: table[p][k]) for k in reps]
                entry[f"vs_{name}_pct"] = dict(zip(("mean", "ci95"), interval(rel), strict=True)) | {
                    "per_replicate": [round(v, 1) for v in rel], "which": best}
            out[f"{group}/{bundle}"] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", action="append", default=[], help="muri, p256 or batch (repeatable)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policy", action="append", default=[],
                        help="restrict to these policies (repeatable)")
    parser.add_argument("--variant", action="append", default=[],
                        help="restrict to these variants (repeatable)")
    parser.add_argument("--window", action="append", default=[],
                        help="restrict to these windows (repeatable)")
    parser.add_argument("--bundle", action="append", default=[],
                        help="restrict to these bundles (repeatable)")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--summary", action="store_true")
    parser.add_argument("--metric", default="avg_jct_s")
    args = parser.parse_args()
    policies = args.policy or list(ALL)
    runs = [run for part in args.part for run in planned(part, args.seeds, policies)
            if (not args.bundle or run.predictors in args.bundle)
            and (not args.window or run.window in args.window)
            and (not args.variant or run.variant in args.variant)]
    if runs:
        run_all(runs, args.parallel)
    if args.summary:
        summary(args.metric)
        print(json.dumps(compare(args.metric), indent=1))


if __name__ == "__main__":
    main()
