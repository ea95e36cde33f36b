"""The formulations package (the round model, the backends, the pipeline, the checker) passes mypy's
``--strict`` with every import resolved.

``mypy engine formulations`` (``make test``) names the modules ``formulations.*``: their imports of
``dltsched.*`` do not resolve there and count as ``Any``. This test checks them under their import names
instead, from a folder that maps ``dltsched/<package>`` to the sources, so that the types a backend takes
from the model, the candidates and the domain are the real ones. Errors in the modules they import are not
reported (``--follow-imports=silent``): those are held to their own standard.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]
#: the packages held to --strict, every module of them
PACKAGES = ("dltsched.formulations",)


def test_formulations_pass_mypy_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "src" / "dltsched"
    package.mkdir(parents=True)
    for folder in ("engine", "formulations", "predictors", "instances"):
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    monkeypatch.setenv("MYPYPATH", str(tmp_path / "src"))
    monkeypatch.chdir(tmp_path)
    args = ["--config-file", str(ROOT / "pyproject.toml"), "--strict", "--follow-imports=silent",
            "--no-incremental", "--cache-dir", os.devnull]
    for package in PACKAGES:
        args += ["-p", package]
    out, err, status = mypy_api.run(args)
    assert status == 0, out + err
    checked = int(out.rsplit(" in ", 1)[1].split()[0])  # "Success: no issues found in N source files"
    modules = len(list((ROOT / "formulations").rglob("*.py")))
    assert out.startswith("Success") and checked == modules, out
