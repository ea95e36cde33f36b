"""Execute the benchmark notebooks in place with their own parameters, so that they are stored with their
outputs and figures inline: ``.venv/bin/python scripts/execute_notebooks.py [NAME ...]``.

Run from the repository root; each notebook runs in ``notebooks/`` and writes its figure files into a
temporary folder (only the inline copies are stored). Images are kept as PNG.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def execute(path: Path, timeout_s: int = 1800) -> float:
    """Execute ``path`` in place (figures to a temporary folder); returns the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as figures:
        for cell in nb.cells:  # figure files go to the temporary folder for this run only
            if "parameters" in cell.metadata.get("tags", []):
                original = cell.source
                cell.source = "\n".join(line if not line.startswith("output_dir =") else
                                        f"output_dir = {figures!r}" for line in original.splitlines())
        began = time.perf_counter()
        NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        for cell in nb.cells:
            if "parameters" in cell.metadata.get("tags", []):
                cell.source = original
        for cell in nb.cells:  # the temporary folder's name is no part of the stored output
            for output in cell.get("outputs", []):
                if "text" in output:
                    output["text"] = output["text"].replace(figures, "figures")
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return time.perf_counter() - began


def main(names: list[str]) -> int:
    paths = [NOTEBOOKS / f"{n}.ipynb" for n in names] if names else sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        seconds = execute(path)
        print(f"{path.name}: {seconds:.0f} s, {path.stat().st_size / 1000:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
