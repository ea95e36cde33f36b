"""MkDocs hook: a source tree that mkdocstrings can read statically.

The package maps its four top-level folders to ``dltsched.engine``, ``dltsched.formulations``,
``dltsched.predictors`` and ``dltsched.instances`` (``[tool.setuptools.package-dir]``), a layout a static
reader cannot guess. This hook links ``build/docs-src/dltsched/<folder>`` to each folder before the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"engine": "engine", "formulations": "formulations", "predictors": "predictors",
           "instances": "instances"}


def on_startup(command: str, dirty: bool) -> None:
    """Link the folders before any plugin reads its configuration: mkdocstrings drops a search path that
    does not exist yet when it configures itself (a fresh clone has no build/ folder)."""
    link_source_tree()


def on_config(config: Any) -> Any:
    link_source_tree()
    return config


def link_source_tree() -> None:
    """``build/docs-src/dltsched/<name>`` -> the package's folder, for each of the four code folders."""
    package = ROOT / "build" / "docs-src" / "dltsched"
    package.mkdir(parents=True, exist_ok=True)
    for name, folder in FOLDERS.items():
        link = package / name
        if link.is_symlink() and link.resolve() == (ROOT / folder).resolve():
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(ROOT / folder, target_is_directory=True)


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>~?([\w.]+)</code>")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Docstrings use Sphinx roles (``:class:`~a.b.C```); show them as code, the short name for ``~``."""

    def short(match: re.Match[str]) -> str:
        whole = match.group(0)
        name = match.group(1)
        return f"<code>{name.rsplit('.', 1)[-1] if '~' in whole else name}</code>"

    return _ROLE.sub(short, html)
