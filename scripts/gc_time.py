"""CPU seconds the cyclic garbage collector spends during a dltsched command, run in this process.

    .venv/bin/python scripts/gc_time.py bench simulate --workload philly --gpus 1024 --policy optimizing

Runs the command (the arguments after the script's name, as ``dltsched`` takes them) with a collector
callback that times every collection (``time.process_time``), and prints one JSON object on stderr: the
process's CPU seconds, the collector's seconds, its collections, and the seconds and collections of the full
(generation 2) ones. The command's own output goes to stdout as usual.
"""

from __future__ import annotations

import gc
import json
import sys
import time


def main() -> None:
    """Run the command and print the collector's figures."""
    spent = {"gc_s": 0.0, "collections": 0, "full_s": 0.0, "full_collections": 0}
    began = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.process_time()
            return
        took = time.process_time() - began[0]
        spent["gc_s"] += took
        spent["collections"] += 1
        if info.get("generation") == 2:
            spent["full_s"] += took
            spent["full_collections"] += 1

    gc.callbacks.append(timed)
    from dltsched.engine.app.cli.main import main as cli

    start = time.process_time()
    code = cli(sys.argv[1:])
    gc.callbacks.remove(timed)
    figures = {"cpu_s": round(time.process_time() - start, 2),
               **{k: round(v, 2) if isinstance(v, float) else v for k, v in spent.items()}}
    print(json.dumps(figures), file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
