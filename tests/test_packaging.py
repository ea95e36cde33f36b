"""Every folder of the four code folders that holds modules or packaged data is listed in pyproject's
``packages``, so that a wheel ships it and setuptools does not warn "absent from the packages
configuration"."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _shipped_folders() -> set[str]:
    config = _config()
    patterns = [p for globs in config["package-data"].values() for p in globs]
    found = set()
    for package, folder in config["package-dir"].items():
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix == ".py" or any(fnmatch.fnmatch(path.name, p) for p in patterns):
                rel = path.parent.relative_to(ROOT / folder)
                found.add(".".join((package, *rel.parts)))
    return found


def test_every_folder_with_modules_or_data_is_a_listed_package() -> None:
    listed = set(_config()["packages"])
    missing = sorted(_shipped_folders() - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert "dltsched.instances.experiments" in listed and "dltsched.instances.data" in listed


def test_listed_packages_exist() -> None:
    config = _config()
    for package in config["packages"]:
        top = ".".join(package.split(".")[:2])
        folder = ROOT / config["package-dir"][top] / Path(*package.split(".")[2:])
        assert folder.is_dir(), f"{package}: no folder {folder}"
