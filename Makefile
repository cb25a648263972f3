# veil — two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt
DEPS   := pyproject.toml constraints.txt

.PHONY: demo test bench lint docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One stamp per install level; each is redone when the dependencies change.
$(VENV)/.core: $(BIN)/python $(DEPS)
	$(PIP) -e .
	@touch $@

$(VENV)/.dev: $(BIN)/python $(DEPS)
	$(PIP) -e ".[torch,dev,spark,fhe,flower,docs]"
	@touch $@ $(VENV)/.core

$(VENV)/.bench: $(VENV)/.dev
	$(PIP) -e ".[torch,dev,spark,fhe,flower,bench]"
	$(PIP) --no-deps pycanon
	@touch $@

$(VENV)/.docs: $(VENV)/.dev
	$(PIP) -e ".[torch,dev,docs]"
	@touch $@

demo: $(VENV)/.core
	$(BIN)/veil demo

# one worker per core; a test file's tests stay on one worker (its module fixtures are built once)
test: $(VENV)/.dev
	$(BIN)/python -m pytest -q -n auto --dist loadfile

bench: $(VENV)/.bench
	@set -e; for script in benchmarks/bench_*.py; do \
		echo "== $$script"; $(BIN)/python $$script; done

# the documentation site (docs/, mkdocs.yml) into site/; a broken link or API page fails it.
# Its tutorials' code runs in `make test` (tests/docs).
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks examples

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
