"""Shared fixtures: the real-data folder (tests marked ``data`` skip cleanly without it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Matplotlib and Jupyter write under $HOME; keep them in a temp dir during tests.
os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="dltsched-mpl-"))
os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="dltsched-ipy-"))
os.environ.setdefault("MPLBACKEND", "Agg")

from dltsched.instances.datadir import find_data_dir  # noqa: E402

_DATA = find_data_dir(required=False)


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
