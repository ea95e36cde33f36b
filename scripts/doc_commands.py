"""Run every ``dltsched`` command shown in the README and the documentation and print its exit code.

    .venv/bin/python scripts/doc_commands.py [--timeout 60] [--readme-only] [--list]

Each shell line that starts with ``dltsched`` (continuation lines joined; ``&&`` chains run as written) runs
with ``bash`` in a scratch folder that links the repository's ``instances`` and ``scripts``, with the virtual
environment's ``bin`` first on ``PATH``, in the order the pages show them (a file one command writes is there
for the next). The data folder the repository would find (``DLTSCHED_DATA``, or ``shared/data`` above it) is
passed on as ``DLTSCHED_DATA``; ``--bare`` passes none, as on a clone with nothing beside it. A command still
running after ``--timeout`` seconds (``serve``, the ``slurm`` daemon) is stopped and reported as 124. Commands
that need the data folder, a GPU or a running Slurm fail without them: that is what the exit codes show. The
summary line counts the exit codes.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shell_lines(page: Path) -> list[str]:
    """The ``dltsched ...`` lines of a page's bash blocks, continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", page.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line.startswith("dltsched "):
                out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per command (default 60)")
    parser.add_argument("--readme-only", action="store_true", help="only the README's commands")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--bare", action="store_true",
                        help="no data folder, as on a clone with nothing beside it")
    args = parser.parse_args(argv)
    pages = [ROOT / "README.md"]
    if not args.readme_only:
        pages += sorted((ROOT / "docs").rglob("*.md"))
    commands = [(page.relative_to(ROOT).as_posix(), line) for page in pages for line in shell_lines(page)]
    if args.list:
        for where, line in commands:
            print(f"{where}: {line}")
        return 0
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               MPLCONFIGDIR=tempfile.mkdtemp(prefix="dltsched-mpl-"))
    env.pop("DLTSCHED_DATA", None)
    if not args.bare:
        data = os.environ.get("DLTSCHED_DATA") or next(
            (str(p / "shared" / "data") for p in (ROOT, *ROOT.parents) if (p / "shared" / "data").is_dir()),
                                                       None)
        if data:
            env["DLTSCHED_DATA"] = data
    print(f"data folder: {env.get('DLTSCHED_DATA', 'none')}", flush=True)
    codes: Counter[int] = Counter()
    with tempfile.TemporaryDirectory(prefix="dltsched-doc-commands-") as scratch:
        for name in ("instances", "scripts"):
            os.symlink(ROOT / name, Path(scratch) / name)
        for where, line in commands:
            started = time.perf_counter()
            proc = subprocess.Popen(["bash", "-c", line], cwd=scratch, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                _, stderr = proc.communicate(timeout=args.timeout)
                code, err = proc.returncode, stderr.strip().splitlines()
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)  # the command's own process group, started for it above
                proc.communicate()
                code, err = 124, [f"still running after {args.timeout:g} s (stopped)"]
            codes[code] += 1
            last = err[-1][:110] if (code and err) else ""
            print(f"{code:>3}  {time.perf_counter() - started:6.1f} s  {where}: {line[:150]}"
                  + (f"\n          {last}" if last else ""), flush=True)
    print("exit codes: " + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items())))
    return 0 if set(codes) <= {0} else 1


if __name__ == "__main__":
    sys.exit(main())
