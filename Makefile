# The two set-up commands of the README:
#   make demo   simulate the shipped default instance under every policy, print the comparison table
#   make test   lint, type-check, check the import contracts (pyproject.toml) and run the full test suite
# Both create or reuse .venv and install what they need.
.PHONY: demo test test-fast test-slurm venv
PY := .venv/bin/python
export MPLCONFIGDIR ?= $(CURDIR)/.venv/.mpl
export IPYTHONDIR ?= $(CURDIR)/.venv/.ipython

venv:
	@bash scripts/setup-venv.sh

demo: venv
	$(PY) -m dltsched.engine.app.cli.main simulate --instance instances/examples/default.json --policy all

test: venv
	$(PY) -m ruff check engine formulations predictors instances tests notebooks
	$(PY) -m mypy engine formulations
	.venv/bin/lint-imports
	$(PY) -m pytest -q -m "not slow and not gpu" -n auto --maxprocesses 4

test-fast: venv
	$(PY) -m pytest -q -x -m "not slow and not gpu and not data"

test-slurm: venv
	bash scripts/slurm-sandbox.sh
	SLURM_CONF=$${DLTSCHED_SLURM_DIR:-/tmp/dltsched-slurm}/etc/slurm.conf $(PY) -m pytest -q -s -m slurm tests/adapters
