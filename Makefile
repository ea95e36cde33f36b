# The two set-up commands of the README:
#   make demo   simulate the shipped default instance under every policy, print the comparison table
#   make test   lint, type-check, check the import contracts (pyproject.toml), build the documentation site
#               (warnings and broken links are errors) and run the full test suite
#   make docs   the documentation site alone, into build/site
# Both create or reuse .venv and install what they need.
.PHONY: demo docs test test-fast test-slurm venv
PY := .venv/bin/python
export MPLCONFIGDIR ?= $(CURDIR)/.venv/.mpl
export IPYTHONDIR ?= $(CURDIR)/.venv/.ipython

venv:
	@bash scripts/setup-venv.sh

demo: venv
	$(PY) -m dltsched.engine.app.cli.main simulate --instance instances/examples/default.json --policy all

docs: venv
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

test: venv
	$(PY) -m ruff check engine formulations predictors instances tests notebooks scripts docs/hooks
	$(PY) -m mypy engine formulations
	.venv/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
	$(PY) -m pytest -q -m "not slow and not gpu" -n auto --maxprocesses 4

test-fast: venv
	$(PY) -m pytest -q -x -m "not slow and not gpu and not data"

test-slurm: venv
	bash scripts/slurm-sandbox.sh
	SLURM_CONF=$${DLTSCHED_SLURM_DIR:-/tmp/dltsched-slurm}/etc/slurm.conf $(PY) -m pytest -q -s -m slurm tests/adapters
