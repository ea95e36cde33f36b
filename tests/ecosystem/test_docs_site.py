"""The README is an entry page and the documentation site holds the rest: size, no lab-notebook references,
every page in the navigation, generated pages that cover what they generate from.

``make test`` builds the site itself with ``mkdocs build --strict`` (broken links and unresolved API
references are errors); these tests check what a build cannot.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import click
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
USER_PAGES = [README, ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]

#: a commit hash: 7 to 40 hex digits holding both digits and letters
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
#: an issue reference: "issue 18", "issue #18", "issue notes", "issue18_..."
ISSUE = re.compile(r"\bissues?\s*#?\d+|\bissue notes\b|\bissue\d+", re.I)


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_readme_is_short_and_has_the_sections_a_newcomer_needs() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    for needed in ("Two commands", "A first run", "Batch solving", "Embedding", "Benchmarking",
                   "Real clusters", "Read more"):
        assert needed in headings, f"README lacks the section '{needed}'"
    assert "make demo" in text and "make test" in text


@pytest.mark.parametrize("page", USER_PAGES, ids=[p.relative_to(ROOT).as_posix() for p in USER_PAGES])
def test_no_commit_hashes_or_issue_references(page: Path) -> None:
    text = page.read_text()
    assert not COMMIT.findall(text), f"{page.name}: commit hashes {COMMIT.findall(text)[:3]}"
    assert not ISSUE.findall(text), f"{page.name}: issue references {ISSUE.findall(text)[:3]}"


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)

    def entries(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [e for item in nav for e in entries(item)]
        if isinstance(nav, dict):
            return [e for value in nav.values() for e in entries(value)]
        return []

    listed = set(entries(config["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert listed == pages
    for slot in ("calibration.md", "slurm.md", "kubernetes.md", "limits.md", "ablation.md"):
        assert slot in listed


def test_results_page_has_a_row_for_every_stored_run_group() -> None:
    results = _hook("results")
    files = sorted(results.RESULTS.glob("*.json"))
    text = results.render_all()
    assert len(files) >= 1
    assert text.count("### ") == len(files)
    table_rows = [line for line in text.splitlines() if line.startswith("| ")
                  and not line.startswith("| window")]
    assert len(table_rows) >= len(files)
    assert all(re.search(r"\| \d+\.\d{3} \| \d+\.\d{3} \|$", row) for row in table_rows)


def test_cli_reference_lists_lazy_subcommands() -> None:
    from dltsched.engine.app.cli.main import cli

    hook = _hook("cli_reference")
    ctx = click.Context(cli)
    names = {c.name for c in hook.sub_commands(cli, ctx)}
    assert {"simulate", "solve", "bench", "predict", "serve", "slurm"} <= names
    simulate = cli.get_command(ctx, "simulate")
    no_default = next(p for p in simulate.params if p.name == "instance_path")
    assert hook.without_unset_default(no_default).default is None  # shown as "None", not click's sentinel
    bench = cli.get_command(ctx, "bench")
    assert {c.name
            for c in hook.sub_commands(bench, click.Context(bench))} >= {"simulate", "solve", "predict"}
