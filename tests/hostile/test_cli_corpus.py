"""Hostile-input corpus of the command line and of instance files.

Each case is a ``dltsched`` argv and, where it names ``{file}``, the body of an instance file: nested JSON,
huge numbers, NaN and Infinity, negatives, strings and bools for numbers, control characters, missing
fields, wrong types, empty and binary files, huge arrays, unknown policies, backends and options, bad
paths. Expected: exit code 2 (0 where the input is legal), exactly one ``error:`` line on stderr, no
traceback anywhere, within the test's timeout. Cases run in-process; a few run as a subprocess.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

BASE: dict[str, Any] = {
    "format": "dltsched-instance",
    "version": 1,
    "name": "hostile-base",
    "metadata": {"note": "corpus base"},
    "reference": {},
    "cluster": {"nodes": [{"id": "n0", "gpu_type": "v100", "num_gpus": 2},
                          {"id": "n1", "gpu_type": "p100", "num_gpus": 2}]},
    "jobs": [
        {"id": "j0", "model": "resnet18", "batch_size": 64, "num_gpus": 1, "total_iterations": 500.0,
         "arrival_time_s": 0.0},
        {"id": "j1", "model": "resnet50", "batch_size": 32, "num_gpus": 2, "total_iterations": 300.0,
         "arrival_time_s": 60.0},
    ],
}
_MISSING = object()


def mutated(path: str, value: Any = _MISSING) -> dict[str, Any]:
    """A copy of BASE with ``path`` (``jobs.0.batch_size``) set to ``value``, or removed without one."""
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node: Any = data
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    key: Any = int(last) if isinstance(node, list) else last
    if value is _MISSING:
        del node[key]
    else:
        node[key] = value
    return data


def raw(path: str, literal: str) -> str:
    """BASE as JSON text with the value at ``path`` replaced by the raw ``literal`` (NaN, 1e400, ...)."""
    marker = "__HOSTILE_LITERAL__"
    return json.dumps(mutated(path, marker)).replace(f'"{marker}"', literal)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    body: str | bytes | dict[str, Any] | None = None
    exit_code: int = 2


def materialize(case: Case, tmp: Path) -> list[str]:
    """argv with ``{file}`` (the instance written from ``body``) and ``{tmp}`` (a folder holding the regular
    file ``afile``) filled in."""
    (tmp / "afile").write_text("a regular file, not a folder\n")
    file = tmp / "instance.json"
    if isinstance(case.body, dict):
        file.write_text(json.dumps(case.body))
    elif isinstance(case.body, bytes):
        file.write_bytes(case.body)
    elif isinstance(case.body, str):
        file.write_text(case.body)
    return [a.replace("{file}", str(file)).replace("{tmp}", str(tmp)) for a in case.argv]


VALIDATE = ("instance", "validate", "{file}")
SIM_FIFO = ("simulate", "--instance", "{file}", "--policy", "fifo", "--predictors", "analytic")
SIM_OPT = ("simulate", "--instance", "{file}", "--policy", "optimizing", "--predictors", "analytic")

# ---- instance files (checked by `instance validate`) -------------------------------------------
BAD_VALUES: list[tuple[str, str, Any]] = [
    # (case id, path, value) - JSON-representable values
    ("iters-1e12", "jobs.0.total_iterations", 1e12),
    ("iters-negative", "jobs.0.total_iterations", -1.0),
    ("iters-zero", "jobs.0.total_iterations", 0),
    ("iters-string", "jobs.0.total_iterations", "500"),
    ("iters-bool", "jobs.0.total_iterations", True),
    ("iters-list", "jobs.0.total_iterations", [500]),
    ("iters-object", "jobs.0.total_iterations", {"n": 500}),
    ("iters-1e308", "jobs.0.total_iterations", 1e308),
    ("batch-zero", "jobs.0.batch_size", 0),
    ("batch-negative", "jobs.0.batch_size", -64),
    ("batch-huge", "jobs.0.batch_size", 10**7),
    ("batch-10e30", "jobs.0.batch_size", 10**30),
    ("batch-float", "jobs.0.batch_size", 64.5),
    ("batch-string", "jobs.0.batch_size", "64"),
    ("batch-bool", "jobs.0.batch_size", True),
    ("batch-null", "jobs.0.batch_size", None),
    ("job-gpus-zero", "jobs.0.num_gpus", 0),
    ("job-gpus-huge", "jobs.0.num_gpus", 10**9),
    ("job-gpus-string", "jobs.0.num_gpus", "2"),
    ("job-gpus-bool", "jobs.0.num_gpus", False),
    ("job-gpus-more-than-cluster", "jobs.0.num_gpus", 64),
    ("arrival-negative", "jobs.0.arrival_time_s", -1.0),
    ("arrival-huge", "jobs.0.arrival_time_s", 1e12),
    ("arrival-string", "jobs.0.arrival_time_s", "0"),
    ("deadline-zero", "jobs.0.deadline_s", 0),
    ("deadline-huge", "jobs.0.deadline_s", 1e20),
    ("hint-negative", "jobs.0.duration_hint_s", -5.0),
    ("hint-huge", "jobs.0.duration_hint_s", 1e15),
    ("weight-zero", "jobs.0.weight", 0),
    ("weight-huge", "jobs.0.weight", 1e9),
    ("budget-one", "jobs.0.accuracy_budget", 1.0),
    ("budget-negative", "jobs.0.accuracy_budget", -0.1),
    ("fraction-zero", "jobs.0.gpu_fraction", 0),
    ("fraction-above-one", "jobs.0.gpu_fraction", 1.5),
    ("amp-string", "jobs.0.amp", "yes"),
    ("amp-int", "jobs.0.amp", 1),
    ("job-id-empty", "jobs.0.id", ""),
    ("job-id-newline", "jobs.0.id", "j\n0"),
    ("job-id-nul", "jobs.0.id", "j\x000"),
    ("job-id-escape", "jobs.0.id", "\x1b[31mred"),
    ("job-id-c1-control", "jobs.0.id", "j\x85"),
    ("job-id-long", "jobs.0.id", "j" * 10_000),
    ("job-id-number", "jobs.0.id", 5),
    ("job-id-null", "jobs.0.id", None),
    ("job-id-duplicate", "jobs.1.id", "j0"),
    ("model-unknown", "jobs.0.model", "no_such_model"),
    ("model-empty", "jobs.0.model", ""),
    ("model-number", "jobs.0.model", 3),
    ("gpu-types-string", "jobs.0.gpu_types", "v100"),
    ("gpu-types-numbers", "jobs.0.gpu_types", [1]),
    ("gpu-types-unknown", "jobs.0.gpu_types", ["h9000"]),
    ("hyper-list", "jobs.0.hyperparameters", {"lr": [1]}),
    ("hyper-control-key", "jobs.0.hyperparameters", {"l\tr": 0.1}),
    ("job-unknown-field", "jobs.0.bogus", 1),
    ("epochs-overflow", "jobs.0", {"id": "j0", "model": "resnet18", "batch_size": 64, "epochs": 1e9,
                                   "iterations_per_epoch": 1e9}),
    ("epochs-and-iters", "jobs.0.epochs", 3),
    ("node-gpus-1e12", "cluster.nodes.0.num_gpus", 10**12),
    ("node-gpus-zero", "cluster.nodes.0.num_gpus", 0),
    ("node-gpus-negative", "cluster.nodes.0.num_gpus", -1),
    ("node-gpus-2000", "cluster.nodes.0.num_gpus", 2000),
    ("node-gpus-string", "cluster.nodes.0.num_gpus", "8"),
    ("node-gpus-bool", "cluster.nodes.0.num_gpus", True),
    ("node-gpus-float", "cluster.nodes.0.num_gpus", 8.5),
    ("node-type-unknown", "cluster.nodes.0.gpu_type", "h9000"),
    ("node-type-empty", "cluster.nodes.0.gpu_type", ""),
    ("node-type-tab", "cluster.nodes.0.gpu_type", "\t"),
    ("node-net-zero", "cluster.nodes.0.network_gbps", 0),
    ("node-net-huge", "cluster.nodes.0.network_gbps", 1e300),
    ("node-id-newline", "cluster.nodes.0.id", "n\n0"),
    ("nodes-empty", "cluster.nodes", []),
    ("nodes-object", "cluster.nodes", {"n0": 2}),
    ("nodes-too-many-gpus", "cluster.nodes", [{"id": f"n{i}", "gpu_type": "v100", "num_gpus": 1024}
                                               for i in range(1000)]),
    ("gpu-type-spec-nan-free-bad", "cluster.gpu_types", [{"id": "x1"}]),
    ("cluster-list", "cluster", []),
    ("jobs-empty", "jobs", []),
    ("jobs-object", "jobs", {"j0": {}}),
    ("jobs-strings", "jobs", ["j0", "j1"]),
    ("name-empty", "name", ""),
    ("name-newline", "name", "a\nb"),
    ("name-long", "name", "n" * 100_000),
    ("format-wrong", "format", "other-format"),
    ("version-2", "version", 2),
    ("version-string", "version", "1"),
    ("version-bool", "version", True),
    ("metadata-deep", "metadata", json.loads("{\"a\": " * 60 + "1" + "}" * 60)),
    ("metadata-list", "metadata", [1, 2]),
    ("top-unknown-field", "bogus", True),
]
MISSING_FIELDS = ["jobs.0.id", "jobs.0.model", "jobs.0.batch_size", "jobs.0.total_iterations", "cluster",
                  "cluster.nodes", "cluster.nodes.0.num_gpus", "cluster.nodes.0.gpu_type", "jobs", "name",
                  "format"]
RAW_LITERALS: list[tuple[str, str, str]] = [
    ("iters-nan", "jobs.0.total_iterations", "NaN"),
    ("iters-infinity", "jobs.0.total_iterations", "Infinity"),
    ("iters-1e400", "jobs.0.total_iterations", "1e400"),
    ("arrival-nan", "jobs.0.arrival_time_s", "NaN"),
    ("arrival-minus-infinity", "jobs.0.arrival_time_s", "-Infinity"),
    ("weight-nan", "jobs.0.weight", "NaN"),
    ("hyper-nan", "jobs.0.hyperparameters", '{"lr": NaN}'),
    ("metadata-nan", "metadata", '{"x": NaN}'),
    ("metadata-infinity", "metadata", '{"x": [1, Infinity]}'),
    ("metadata-1e400", "metadata", '{"x": -1e400}'),
    ("reference-nan", "reference", '{"avg_jct_s": NaN}'),
    ("node-gpus-5000-digits", "cluster.nodes.0.num_gpus", "9" * 5000),
    ("node-net-nan", "cluster.nodes.0.network_gbps", "NaN"),
]
BAD_FILES: list[tuple[str, str | bytes]] = [
    ("empty", ""),
    ("whitespace", "  \n\t "),
    ("truncated", json.dumps(BASE)[:200]),
    ("open-brace", "{"),
    ("top-list", "[]"),
    ("top-null", "null"),
    ("top-number", "42"),
    ("top-string", '"instance"'),
    ("trailing-garbage", json.dumps(BASE) + " x"),
    ("comments", "// a comment\n" + json.dumps(BASE)),
    ("binary-garbage", b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x00" * 64),
    ("utf16", json.dumps(BASE).encode("utf-16")),
    ("latin1-name", json.dumps(mutated("name", "caf\u00e9")).encode("utf-8").replace(b"\\u00e9", b"\xe9")),
    ("nested-lists-100k", "[" * 100_000 + "]" * 100_000),
    ("nested-objects-100k", '{"a":' * 100_000 + "1" + "}" * 100_000),
    ("nested-in-metadata-100k", raw("metadata", '{"a":' * 100_000 + "1" + "}" * 100_000)),
    ("integer-10k-digits", "9" * 10_000),
    ("nul-bytes", b"\x00" * 1000),
]
LEGAL_FILES: list[tuple[str, str | dict[str, Any]]] = [
    ("base", BASE),
    ("unicode-name", mutated("name", "r\u00e9seau-\u6e2c\u8a66")),
    ("metadata-big-array", mutated("metadata", {"xs": list(range(100_000))})),
    ("bounds-at-limit", mutated("jobs.0.total_iterations", 1e10)),
]

CASES: list[Case] = []
CASES += [Case(f"file-{cid}", VALIDATE, mutated(path, value)) for cid, path, value in BAD_VALUES]
CASES += [Case(f"file-missing-{p}", VALIDATE, mutated(p)) for p in MISSING_FIELDS]
CASES += [Case(f"file-{cid}", VALIDATE, raw(path, lit)) for cid, path, lit in RAW_LITERALS]
CASES += [Case(f"file-{cid}", VALIDATE, body) for cid, body in BAD_FILES]
CASES += [Case(f"file-legal-{cid}", VALIDATE, body, exit_code=0) for cid, body in LEGAL_FILES]
CASES += [Case("file-duplicate-keys", VALIDATE, json.dumps(BASE)[:-1] + ', "name": "last-wins"}')]

# the same hostile files through the other readers
CASES += [
    Case("show-json-nan-metadata", ("instance", "show", "--json", "{file}"), raw("metadata", '{"x": NaN}')),
    Case("show-json-legal", ("instance", "show", "--json", "{file}"), BASE, exit_code=0),
    Case("show-nested", ("instance", "show", "{file}"), "[" * 50_000 + "]" * 50_000),
    Case("show-node-1e12", ("instance", "show", "{file}"), mutated("cluster.nodes.0.num_gpus", 10**12)),
    Case("simulate-nested", SIM_FIFO, '{"a":' * 100_000 + "1" + "}" * 100_000),
    Case("simulate-node-1e12", SIM_FIFO, mutated("cluster.nodes.0.num_gpus", 10**12)),
    Case("simulate-iters-1e12", SIM_FIFO, mutated("jobs.0.total_iterations", 1e12)),
    Case("simulate-binary", SIM_FIFO, b"\xff\xd8\xff\xe0" * 100),
    Case("simulate-empty", SIM_FIFO, ""),
    Case("solve-nested", ("solve", "{file}"), "[" * 100_000 + "]" * 100_000),
    Case("solve-node-1e12", ("solve", "{file}"), mutated("cluster.nodes.0.num_gpus", 10**12)),
    Case("solve-top-list", ("solve", "{file}"), "[1, 2]"),
    Case("solve-round-missing-keys", ("solve", "{file}"), {"format": "dltsched-round/1"}),
    Case("solve-round-wrong-types", ("solve", "{file}"),
         {"format": "dltsched-round/1", "state": [], "options": 5,
                                                          "jobs": "x"}),
    Case("solve-nan", ("solve", "{file}"), raw("jobs.0.total_iterations", "NaN")),
    Case("solve-empty", ("solve", "{file}"), ""),
]

# ---- command-line arguments ------------------------------------------------------------------------
BAD_OPTIONS = [
    ("opt-bogus", SIM_OPT, "bogus=1"),
    ("opt-time-limit-typo", SIM_OPT, "time_limit=3"),
    ("opt-to-fifo", SIM_FIFO, "time_limit_s=3"),
    ("opt-round-zero", SIM_FIFO, "round_interval_s=0"),
    ("opt-round-negative", SIM_OPT, "round_interval_s=-5"),
    ("opt-round-nan", SIM_FIFO, "round_interval_s=NaN"),
    ("opt-round-infinity", SIM_FIFO, "round_interval_s=Infinity"),
    ("opt-round-1e400", SIM_FIFO, "round_interval_s=1e400"),
    ("opt-round-huge", SIM_FIFO, "round_interval_s=1e30"),
    ("opt-time-limit-string", SIM_OPT, 'time_limit_s="3"'),
    ("opt-time-limit-text", SIM_OPT, "time_limit_s=abc"),
    ("opt-time-limit-bool", SIM_OPT, "time_limit_s=true"),
    ("opt-time-limit-zero", SIM_OPT, "time_limit_s=0"),
    ("opt-time-limit-list", SIM_OPT, "time_limit_s=[1,2]"),
    ("opt-time-limit-deep", SIM_OPT, "time_limit_s=" + "[" * 50_000 + "]" * 50_000),
    ("opt-backend-unknown", SIM_OPT, "backend=zz"),
    ("opt-objective-unknown", SIM_OPT, "objective=zz"),
    ("opt-fallback-unknown", SIM_OPT, "fallback_policy=zz"),
    ("opt-max-round-jobs-1", SIM_OPT, "max_round_jobs=1"),
    ("opt-max-jobs-per-gpu-9", SIM_OPT, "max_jobs_per_gpu=9"),
    ("opt-freeze-levels-99", SIM_OPT, "freeze_levels=99"),
    ("opt-min-interval-negative", SIM_OPT, "min_interval_s=-1"),
    ("opt-predictors-key", SIM_OPT, "predictors=analytic"),
    ("opt-name-key", SIM_FIFO, "name=evil"),
    ("opt-no-equals", SIM_FIFO, "round_interval_s"),
    ("opt-empty-key", SIM_FIFO, "=3"),
    ("opt-control-key", SIM_FIFO, "round\x1b_interval_s=3"),
    ("opt-backfill-string", SIM_FIFO, "backfill=yes"),
    ("opt-thresholds-descending", ("simulate", "--instance", "{file}", "--policy", "tiresias"),
     "thresholds_gpu_s=[5000,100]"),
]
CASES += [Case(cid, (*argv, "--option", opt), BASE) for cid, argv, opt in BAD_OPTIONS]
CASES += [
    Case("opt-twice", (*SIM_FIFO, "--option", "backfill=true", "--option", "backfill=false"), BASE),
    Case("opt-none-of-several", ("simulate", "--instance", "{file}", "--policy", "fifo", "--policy", "sjf",
                                 "--option", "time_limit_s=2"), BASE),
    Case("opt-nocoloc-max-jobs", ("simulate", "--instance", "{file}", "--policy", "optimizing-nocoloc",
                                  "--option", "max_jobs_per_gpu=2"), BASE),
    Case("policy-unknown", ("simulate", "--instance", "{file}", "--policy", "nosuch"), BASE),
    Case("policy-comma-list", ("simulate", "--instance", "{file}", "--policy", "fifo,sjf"), BASE),
    Case("policy-control-chars", ("simulate", "--instance", "{file}", "--policy", "fi\x1bfo"), BASE),
    Case("sim-seed-negative", (*SIM_FIFO, "--seed", "-1"), BASE),
    Case("sim-seed-huge", (*SIM_FIFO, "--seed", str(10**40)), BASE),
    Case("sim-seed-text", (*SIM_FIFO, "--seed", "abc"), BASE),
    Case("sim-prediction-error-nan", (*SIM_FIFO, "--prediction-error", "nan"), BASE),
    Case("sim-prediction-error-inf", (*SIM_FIFO, "--prediction-error", "inf"), BASE),
    Case("sim-prediction-error-negative", (*SIM_FIFO, "--prediction-error", "-1"), BASE),
    Case("sim-memory-unknown", (*SIM_FIFO, "--memory", "ignore"), BASE),
    Case("sim-jobs-zero", ("simulate", "--workload", "philly", "--jobs", "0"), None),
    Case("sim-instance-missing", ("simulate", "--instance", "{tmp}/nope.json", "--policy", "fifo"), None),
    Case("sim-instance-folder", ("simulate", "--instance", "{tmp}", "--policy", "fifo"), None),
    Case("sim-instance-and-workload", ("simulate", "--instance", "{file}", "--workload", "philly"), BASE),
    Case("sim-neither", ("simulate", "--policy", "fifo"), None),
    Case("sim-workload-unknown", ("simulate", "--workload", "nosuch", "--policy", "fifo"), None),
    Case("sim-output-under-file", (*SIM_FIFO, "-o", "{tmp}/afile/x.json"), BASE),
    Case("sim-output-is-folder", (*SIM_FIFO, "-o", "{tmp}"), BASE),
    Case("sim-unknown-flag", (*SIM_FIFO, "--bogus"), BASE),
    Case("sim-predictors-unknown",
         ("simulate", "--instance", "{file}", "--policy", "fifo", "--predictors", "zz"), BASE),
    Case("sim-instance-nul-path", ("simulate", "--instance", "{tmp}/a\x00b.json", "--policy", "fifo"), None),
    Case("solve-solver-unknown", ("solve", "{file}", "--backend", "milp", "--solver", "zz", "--predictors",
                                  "analytic"), BASE),
    Case("solve-solver-without-milp", ("solve", "{file}", "--solver", "highs"), BASE),
    Case("solve-backend-unknown", ("solve", "{file}", "--backend", "zz"), BASE),
    Case("solve-objective-unknown", ("solve", "{file}", "--objective", "zz"), BASE),
    Case("solve-time-limit-nan", ("solve", "{file}", "--time-limit", "nan"), BASE),
    Case("solve-time-limit-zero", ("solve", "{file}", "--time-limit", "0"), BASE),
    Case("solve-time-limit-negative", ("solve", "{file}", "--time-limit", "-3"), BASE),
    Case("solve-time-limit-huge", ("solve", "{file}", "--time-limit", "1e9"), BASE),
    Case("solve-max-jobs-per-gpu", ("solve", "{file}", "--max-jobs-per-gpu", "9"), BASE),
    Case("solve-save-round-under-file", ("solve", "{file}", "--backend", "greedy", "--predictors", "analytic",
                                         "--save-round", "{tmp}/afile/r.json"), BASE),
    Case("solve-missing-file", ("solve", "{tmp}/nope.json"), None),
    Case("gen-output-under-file", ("instance", "generate", "--jobs", "3", "-o", "{tmp}/afile/x.json"), None),
    Case("gen-jobs-zero", ("instance", "generate", "--jobs", "0", "-o", "{tmp}/g.json"), None),
    Case("gen-jobs-negative", ("instance", "generate", "--jobs", "-5", "-o", "{tmp}/g.json"), None),
    Case("gen-gpus-1e12", ("instance", "generate", "--gpus", str(10**12), "-o", "{tmp}/g.json"), None),
    Case("gen-gpus-per-node-zero", ("instance", "generate", "--gpus-per-node", "0", "-o", "{tmp}/g.json"),
         None),
    Case("gen-gpus-per-node-huge",
         ("instance", "generate", "--gpus-per-node", "100000", "-o", "{tmp}/g.json"), None),
    Case("gen-gpus-above-limit", ("instance", "generate", "--gpus", "100001", "-o", "{tmp}/g.json"), None),
    Case("gen-arrival-nan", ("instance", "generate", "--arrival-rate", "nan", "-o", "{tmp}/g.json"), None),
    Case("gen-arrival-zero", ("instance", "generate", "--arrival-rate", "0", "-o", "{tmp}/g.json"), None),
    Case("gen-duration-inf", ("instance", "generate", "--max-duration-s", "inf", "-o", "{tmp}/g.json"), None),
    Case("gen-durations-swapped",
         ("instance", "generate", "--min-duration-s", "5000", "--max-duration-s", "100",
                                   "-o", "{tmp}/g.json"), None),
    Case("gen-freeze-fraction-2", ("instance", "generate", "--freeze-fraction", "2", "-o", "{tmp}/g.json"),
         None),
    Case("gen-seed-negative", ("instance", "generate", "--seed", "-1", "-o", "{tmp}/g.json"), None),
    Case("gen-gpu-type-unknown", ("instance", "generate", "--gpu-types", "h9000", "-o", "{tmp}/g.json"),
         None),
    Case("gen-cluster-garbage", ("instance", "generate", "--cluster", "v100::x", "-o", "{tmp}/g.json"), None),
    Case("gen-no-output", ("instance", "generate", "--jobs", "3"), None),
    Case("schema-output-under-file", ("instance", "schema", "-o", "{tmp}/afile/s.json"), None),
    Case("convert-unknown-workload", ("instance", "convert", "nosuch", "-o", "{tmp}/c.json"), None),
    Case("convert-start-nan", ("instance", "convert", "philly", "--start-s", "nan", "-o", "{tmp}/c.json"),
         None),
    Case("convert-max-jobs-zero", ("instance", "convert", "philly", "--max-jobs", "0", "-o", "{tmp}/c.json"),
         None),
    Case("validate-missing", ("instance", "validate", "{tmp}/nope.json"), None),
    Case("validate-folder", ("instance", "validate", "{tmp}"), None),
    Case("batch-nothing-found", ("batch", "{tmp}/none-*.json", "-o", "{tmp}/out"), None),
    Case("batch-seeds-text", ("batch", "{file}", "--seeds", "a-b", "-o", "{tmp}/out"), BASE),
    Case("batch-seeds-empty", ("batch", "{file}", "--seeds", "", "-o", "{tmp}/out"), BASE),
    Case("batch-policy-unknown", ("batch", "{file}", "--policy", "nosuch", "-o", "{tmp}/out"), BASE),
    Case("batch-time-limit-nan", ("batch", "{file}", "--time-limit", "nan", "-o", "{tmp}/out"), BASE),
    Case("batch-time-limit-zero", ("batch", "{file}", "--time-limit", "0", "-o", "{tmp}/out"), BASE),
    Case("batch-out-is-file", ("batch", "{file}", "--policy", "fifo", "-j", "1", "-o", "{tmp}/afile"), BASE),
    Case("batch-run-fails", ("batch", "{file}", "--policy", "fifo", "-j", "1", "--predictors", "analytic",
                             "-o", "{tmp}/out"), mutated("jobs.0.model", "no_such_model")),
    Case("bench-sim-option-bogus",
         ("bench", "simulate", "--instance", "{file}", "--policy", "fifo", "--option",
                                    "bogus=1"), BASE),
    Case("bench-sim-seed-negative", ("bench", "simulate", "--instance", "{file}", "--seed", "-4"), BASE),
    Case("bench-solve-gap-nan", ("bench", "solve", "--gap", "nan"), None),
    Case("bench-solve-size-garbage", ("bench", "solve", "--sizes", "axb", "--backend", "cpsat"), None),
    Case("calibrate-without-output", ("predict", "calibrate-steptime"), None),
    Case("calibrate-output-and-packaged", ("predict", "calibrate-steptime", "--output", "{tmp}/f.json",
                                           "--overwrite-packaged"), None),
    Case("build-graphs-without-flag", ("predict", "build-graphs"), None),
    Case("command-unknown", ("nosuch",), None),
    Case("top-flag-unknown", ("--bogus",), None),
    Case("instance-subcommand-unknown", ("instance", "nosuch"), None),
    Case("help", ("--help",), None, exit_code=0),
    Case("simulate-help-states-option-rule", ("simulate", "--help"), None, exit_code=0),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_cli_case(case: Case, tmp_path: Path, run_cli: Any, check_cli_outcome: Any) -> None:
    got = run_cli(materialize(case, tmp_path))
    check_cli_outcome(got, case.exit_code)


LEGAL_RUNS = [
    Case("legal-simulate-fifo-json", (*SIM_FIFO, "--json"), BASE, exit_code=0),
    Case("legal-simulate-option-round", (*SIM_FIFO, "--option", "round_interval_s=600", "--json"), BASE,
         exit_code=0),
    Case("legal-simulate-option-to-one-of-two",
         ("simulate", "--instance", "{file}", "--policy", "fifo", "--policy",
                                                 "sjf", "--predictors", "analytic", "--option",
          "backfill=true",
                                                 "--json"), BASE, exit_code=0),
    Case("legal-simulate-tiresias-thresholds", ("simulate", "--instance", "{file}", "--policy", "tiresias",
                                                "--predictors", "analytic", "--option",
                                                "thresholds_gpu_s=[100,1000]", "--json"), BASE, exit_code=0),
    Case("legal-solve-greedy-json", ("solve", "{file}", "--backend", "greedy", "--predictors", "analytic",
                                     "--json"), BASE, exit_code=0),
]


@pytest.mark.data
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in LEGAL_RUNS])
def test_legal_run_prints_strict_json(case: Case, tmp_path: Path, run_cli: Any, check_cli_outcome: Any,
                                      parse_strict_json: Any) -> None:
    """Legal input runs (exit 0) and its --json output is standard JSON (no bare NaN or Infinity)."""
    got = run_cli(materialize(case, tmp_path))
    check_cli_outcome(got, 0)
    parse_strict_json(got.stdout)


def test_simulate_help_states_the_option_rule(run_cli: Any) -> None:
    got = run_cli(["simulate", "--help"])
    text = " ".join(got.stdout.split())
    assert "error only if none of them does" in text


def test_batch_failure_names_the_failed_run(tmp_path: Path, run_cli: Any) -> None:
    case = Case("x", ("batch", "{file}", "--policy", "fifo", "-j", "1", "--predictors", "analytic",
                      "-o", "{tmp}/out"), mutated("jobs.0.model", "no_such_model"))
    got = run_cli(materialize(case, tmp_path))
    assert got.exit_code == 2
    assert "1 of 1 runs failed" in got.stderr and "fifo seed 0" in got.stderr


SUBPROCESS_CASES = [
    Case("sub-validate-nested", VALIDATE, "[" * 200_000 + "]" * 200_000),
    Case("sub-simulate-option-typo", (*SIM_OPT, "--option", "time_limit=3"), BASE),
    Case("sub-solve-solver-unknown",
         ("solve", "{file}", "--backend", "milp", "--solver", "zz", "--predictors",
                                      "analytic"), BASE),
    Case("sub-generate-under-file", ("instance", "generate", "--jobs", "3", "-o", "{tmp}/afile/x.json"),
         None),
    Case("sub-show-nan", ("instance", "show", "--json", "{file}"), raw("metadata", '{"x": NaN}')),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in SUBPROCESS_CASES])
def test_cli_case_subprocess(case: Case, tmp_path: Path, run_cli_subprocess: Any,
                             check_cli_outcome: Any) -> None:
    got = run_cli_subprocess(materialize(case, tmp_path))
    check_cli_outcome(got, case.exit_code)


def test_corpus_size() -> None:
    """The corpus keeps at least 120 command-line and instance-file cases."""
    assert len(CASES) + len(LEGAL_RUNS) + len(SUBPROCESS_CASES) >= 120
