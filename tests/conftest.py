"""Shared fixtures: the real-data folder (tests marked ``data`` skip cleanly without it), and the
solver ``backend`` every round and policy test runs on: each selected backend in turn.

``--backends cpsat,highs`` selects them (default: every built-in exact backend,
``dltsched.formulations.backends.EXACT_BACKENDS``); any exact backend of the registry is accepted, one
registered by a plugin module too (``-p my_backend --backends mine``: see
``tests/formulations/toy_backend.py``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Matplotlib and Jupyter write under $HOME; keep them in a temp dir during tests.
os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="dltsched-mpl-"))
os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="dltsched-ipy-"))
os.environ.setdefault("MPLBACKEND", "Agg")

from dltsched.formulations.backends import EXACT_BACKENDS, backend_names  # noqa: E402
from dltsched.instances.datadir import find_data_dir  # noqa: E402

_DATA = find_data_dir(required=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backends", default=",".join(EXACT_BACKENDS),
                     help=f"comma-separated exact solver backends the round and policy tests run on (known: "
                          f"{', '.join(EXACT_BACKENDS)}; default: all)")


def selected_backends(config: pytest.Config) -> tuple[str, ...]:
    """The backends chosen with ``--backends``: exact backends of the registry (the tests assert optima),
    read when the tests are collected, so that a backend registered by a plugin module counts."""
    names = tuple(n.strip() for n in str(config.getoption("backends")).split(",") if n.strip())
    exact = backend_names(exact=True)
    unknown = [n for n in names if n not in exact]
    if unknown or not names:
        raise pytest.UsageError(f"--backends: {', '.join(unknown) or 'none'} not understood; exact backends "
                                f"of the registry ({', '.join(backend_names())}): {', '.join(exact)}")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that takes ``backend`` (and does not choose its own) runs once per selected backend."""
    if "backend" not in metafunc.fixturenames:
        return
    if any("backend" in m.args[0] for m in metafunc.definition.iter_markers("parametrize")):
        return
    metafunc.parametrize("backend", selected_backends(metafunc.config))


@pytest.fixture(scope="session")
def backends(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """All the selected backends at once, for tests that compare them."""
    return selected_backends(request.config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _DATA is not None:
        return
    skip = pytest.mark.skip(reason="shared data folder not found (set DLTSCHED_DATA)")
    for item in items:
        if "data" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data folder; only for tests marked ``data``."""
    if _DATA is None:
        pytest.skip("shared data folder not found (set DLTSCHED_DATA)")
    return _DATA


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
