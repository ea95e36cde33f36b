#!/usr/bin/env bash
# Create or reuse .venv and install dltsched with everything the tests and the demo need.
# torch is installed first, pinned, in its own step: a CPU wheel satisfies the pin, while an
# unpinned torch would pull gigabytes of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.dltsched-installed
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
# Reinstall only when the project's declared dependencies changed.
WANT=$(sha256sum pyproject.toml scripts/setup-venv.sh | sha256sum | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    exit 0
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[gnn,notebooks,service,ray,docs,dev]"
echo "$WANT" > "$STAMP"
