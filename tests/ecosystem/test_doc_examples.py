"""The Python examples of the README and the documentation run as written.

Every ```python block of ``README.md`` and ``docs/**/*.md`` runs in a fresh namespace from the repository root
(the examples name files such as ``instances/examples/default.json`` relative to it). Blocks of one page run
in order in one namespace, as a reader would paste them. A block that is not meant to run is fenced ```text.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


#: what a page's examples must print (the figures they show in comments)
EXPECTED = {"README.md": "measured", "docs/getting-started.md": "on the measured truth"}

EXAMPLES = [(p, blocks) for p in PAGES if (blocks := python_blocks(p.read_text()))]


def test_the_readme_and_the_docs_have_examples() -> None:
    names = {p.relative_to(ROOT).as_posix() for p, _ in EXAMPLES}
    assert "README.md" in names
    assert any(n.startswith("docs/") for n in names)


@pytest.mark.parametrize("page,blocks", EXAMPLES, ids=[p.relative_to(ROOT).as_posix() for p, _ in EXAMPLES])
def test_examples_run(page: Path, blocks: list[str], monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    for i, block in enumerate(blocks):
        code = compile(block, f"{page.name} example {i + 1}", "exec")
        exec(code, namespace)  # noqa: S102 (the examples are this repository's own text)
    out = capsys.readouterr().out
    assert out.strip(), f"{page.name}: the examples print nothing"
    expected = EXPECTED.get(page.relative_to(ROOT).as_posix())
    assert expected is None or expected in out, f"{page.name}: expected {expected!r} in {out!r}"
    assert os.getcwd() == str(ROOT)
