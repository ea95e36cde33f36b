"""Adding a backend is one file: ``toy_backend.py`` (SciPy's MILP over the round model, registered by the
decorator) passes the backend test suite through the ``--backends`` fixture, as a user's backend would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the tests that run on every backend and assert optima (constraint behaviour, the oracle, instances)
SUITE = ("test_round_backends.py", "test_round_oracle.py", "test_multi_stage_values.py",
         "test_round_instances.py")


def test_a_backend_in_one_file_passes_the_backend_suite() -> None:
    path = os.pathsep.join(filter(None, (str(HERE), os.environ.get("PYTHONPATH"))))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                          "-p", "toy_backend", "--backends", "toy", *(str(HERE / f) for f in SUITE)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path},
                         cwd=HERE.parents[1], timeout=240)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    ran_on_toy = re.findall(r"^PASSED \S+\[toy[^\]]*\]", out, flags=re.MULTILINE)
    assert len(ran_on_toy) >= 10, out[-3000:]  # every constraint-behaviour test ran with backend="toy"
    assert not re.search(r"\[(cpsat|highs|pyomo)[-\]]", out), "only the toy backend was selected"
