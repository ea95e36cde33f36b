"""The domain layer passes mypy's ``--strict`` with every import resolved.

``mypy engine formulations`` (``make test``) names the modules ``engine.domain.*``: their imports of
``dltsched.engine.domain.*`` do not resolve there and count as ``Any``. This test checks the package under its
import name instead, from a folder that maps ``dltsched/engine/domain`` to the source, so that every type a
domain module takes from a sibling is the real one. Errors in modules the domain imports from outside it (the
package root wires the layers) are not reported: the layer below everything is held to its own standard.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

DOMAIN = Path(__file__).resolve().parents[3] / "engine" / "domain"


def test_domain_passes_mypy_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "src" / "dltsched" / "engine"
    package.mkdir(parents=True)
    (package / "domain").symlink_to(DOMAIN, target_is_directory=True)
    monkeypatch.setenv("MYPYPATH", str(tmp_path / "src"))
    out, err, status = mypy_api.run(["--strict", "--follow-imports=silent", "--no-incremental",
                                     "--cache-dir", os.devnull, "-p", "dltsched.engine.domain"])
    assert status == 0, out + err
    checked = int(out.rsplit(" in ", 1)[1].split()[0])  # "Success: no issues found in N source files"
    assert out.startswith("Success") and checked == len(list(DOMAIN.glob("*.py"))), out
