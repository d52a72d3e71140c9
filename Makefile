# Podracer RLOps: `make run` and `make test` are the two commands a newcomer needs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test`: the suite's budget is 2 cores (docs/testing.md)
TEST_WORKERS ?= 2

# Quiet and offline settings live in .env; export them to every recipe.
include .env
export

.PHONY: help install run test test-fast mutate repro mlflow-ui bench-data bench-train clean clean-data
.DEFAULT_GOAL := help

help:
	@echo "make run        install into .venv and run the whole pipeline on the embedded market"
	@echo "make test       install into .venv and run the test suite"
	@echo "make test-fast  unit tests only (skips the slow end-to-end tests)"
	@echo "make mutate     mutation testing of the modules that decide (slow; report in docs/testing.md)"
	@echo "make repro      run the same stages through DVC (dvc repro)"
	@echo "make bench-data / bench-train  run a benchmark; results go to docs/benchmarks.md"
	@echo "make mlflow-ui  open the MLflow UI on the local store at http://127.0.0.1:5000"
	@echo "make clean-data remove generated data/ and mlflow/ content"

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required; set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==25.3
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps finrl==0.3.7  # only its env module is used (benchmarks/)
	@touch $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/podracer run

test: $(STAMP)
	tests/standins/ensure_postgres.sh
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

test-fast: $(STAMP)
	tests/standins/ensure_postgres.sh
	$(BIN)/python -m pytest -m "not slow"

# Mutation testing (docs/testing.md): not part of `make test`, it takes tens of minutes.
mutate: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,mutate]'
	rm -rf mutants
	start=$$(date +%s); $(BIN)/mutmut run --max-children 2 > mutants.log 2>&1 || { tail -20 mutants.log; exit 1; }; \
	  $(BIN)/python tests/mutation/report.py --seconds $$(( $$(date +%s) - start ))

repro: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

bench-data: $(STAMP)
	$(BIN)/python benchmarks/data.py

bench-train: $(STAMP)
	$(BIN)/python benchmarks/train.py

mlflow-ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow/mlflow.db --host 127.0.0.1 --port 5000

clean-data:
	find data -mindepth 1 ! -name README.md ! -name .gitignore -exec rm -rf {} +
	find mlflow -mindepth 1 ! -name README.md ! -name .gitignore -exec rm -rf {} +

clean: clean-data
	rm -rf $(VENV)
