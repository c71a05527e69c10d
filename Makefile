# One entry point for setup, the main job, the tests and the benchmarks.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: setup demo serve test test-fast bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

## The main job, end to end on bundled data (embedded SQLite + local MLflow store under ./work).
demo: $(STAMP)
	$(BIN)/predictor demo --workdir work

## The API and dashboard over what `make demo` trained (its state store and MLflow store in ./work).
serve: $(STAMP)
	cd work && PREDICTOR_INVENTORY_FILE=$(CURDIR)/data/inventory/example-cluster.yaml ../$(BIN)/predictor serve

## The whole test suite (slow and integration tests included).
test: $(STAMP)
	$(BIN)/python -m pytest

## Everything but the slow tests.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check features models predictor serving tests benchmarks

clean:
	rm -rf $(VENV) work .pytest_cache .ruff_cache .hypothesis
