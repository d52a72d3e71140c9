# Podracer RLOps: `make run` and `make test` are the two commands a newcomer needs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test`: the suite's budget is 2 cores, and its long tests wait on
# servers and subprocesses, so a third worker uses the cores meanwhile (docs/testing.md, Where the time goes)
TEST_WORKERS ?= 3

# Quiet and offline settings live in .env; export them to every recipe.
include .env
export

.PHONY: help install run test test-fast mutate repro mlflow-ui bench bench-data bench-train gpu-prep clean clean-data
.DEFAULT_GOAL := help

help:
	@echo "make run        install into .venv and run the whole pipeline on the embedded market"
	@echo "make test       install into .venv and run the test suite"
	@echo "make test-fast  unit tests only (skips the slow end-to-end tests)"
	@echo "make mutate     mutation testing of the modules that decide (slow; report in docs/testing.md)"
	@echo "make repro      run the same stages through DVC (dvc repro)"
	@echo "make bench      list the benchmarks: the command that runs each and what it measures"
	@echo "make bench-data / bench-train  run a benchmark; results go to docs/benchmarks.md"
	@echo "make gpu-prep   before a GPU machine's run: dask's wheels into .whl/, the tree's stamp into .stamp/"
	@echo "make mlflow-ui  open the MLflow UI on the local store at http://127.0.0.1:5000"
	@echo "make clean-data remove generated data/ and mlflow/ content"

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required; set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==25.3
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps finrl==0.3.7  # only its env module is used (benchmarks/perf/baselines.py)
	@touch $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/podracer run

# The project's bytecode, compiled once before the suite: its tests start Python processes by
# the dozen (commands, services, flow runs), and where PYTHONDONTWRITEBYTECODE is set (it is on
# the machine of docs/testing.md's readings) each would compile the project again.
# pip compiles the libraries when it installs them.
BYTECODE := $(BIN)/python -m compileall -q flows tasks trainers deploy standins benchmarks tests > /dev/null

test: $(STAMP)
	tests/standins/ensure_postgres.sh
	$(BYTECODE)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist load --maxschedchunk 1

test-fast: $(STAMP)
	tests/standins/ensure_postgres.sh
	$(BYTECODE)
	$(BIN)/python -m pytest -m "not slow"

# Mutation testing (docs/testing.md): not part of `make test`, it takes tens of minutes.
mutate: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,mutate]'
	rm -rf mutants
	start=$$(date +%s); $(BIN)/mutmut run --max-children 2 > mutants.log 2>&1 || { tail -20 mutants.log; exit 1; }; \
	  $(BIN)/python tests/mutation/report.py --seconds $$(( $$(date +%s) - start ))

repro: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

# The benchmarks (docs/benchmarks.md; benchmarks/__init__.py): each runs from the repository root as
# `.venv/bin/python -m benchmarks.FOLDER.NAME` and records its section of docs/benchmarks.md.
bench:
	@echo "perf: rerunnable performance benchmarks (docs/benchmarks.md)"
	@echo "  python -m benchmarks.perf.data         ingest + validate + features: rows/s, peak memory (daily, minute)"
	@echo "  python -m benchmarks.perf.train        env steps/s and PPO samples/s against FinRL + Stable-Baselines3"
	@echo "  python -m benchmarks.perf.population   a population as one batched model vs one agent after another"
	@echo "  python -m benchmarks.perf.broker       paper broker: orders/s, one trading-loop cycle, start time"
	@echo "  python -m benchmarks.perf.cycle        data event -> CT cycle -> champion -> orders, as a user runs it"
	@echo "  python -m benchmarks.perf.heal         podracer up's supervisor: services killed, time until they answer"
	@echo "  python -m benchmarks.perf.wrds         WRDS TAQ client memory as the range of trades grows"
	@echo "  python -m benchmarks.perf.paper        100 stocks x 10 years of minutes end to end: time, peak memory"
	@echo "  python -m benchmarks.perf.gpu_update   the PPO update's bytes a sample-epoch against the necessary bytes"
	@echo "  python -m benchmarks.perf.gpu_kernel   the update kernel's builds compiled for an H100: instructions, ceiling"
	@echo "  python3 -m benchmarks.perf.gpu --out OUT   on a GPU machine: env, PPO, parity, headline (--record OUT here)"
	@echo "evidence: the runs behind docs/results.md (many seeds, hours)"
	@echo "  python -m benchmarks.evidence.results       champion vs vanilla, momentum, oracle, buy-and-hold on test"
	@echo "  python -m benchmarks.evidence.algorithms    PPO, SAC, a mixed pool and ensembles at equal env steps"
	@echo "  python -m benchmarks.evidence.gate          the gate's size, power and payoff (calibrate, ct, pipeline)"
	@echo "  python -m benchmarks.evidence.gate_twins    the CT gate's near-twin challengers: measured, simulated"
	@echo "  python -m benchmarks.evidence.default_runs  how often podracer run as shipped promotes, by seed"
	@echo "archive: finished studies, kept to reproduce a decision (benchmarks/archive/__init__.py)"
	@echo "  python -m benchmarks.archive.ceiling     a least-squares scorer through the action, no RL"
	@echo "  python -m benchmarks.archive.selection   the best validation snapshot vs ensembles of snapshots"
	@echo "  python -m benchmarks.archive.nitro       Nitro's boosted env counts vs static at an equal budget"
	@echo "  python -m benchmarks.archive.train_freq  env steps/s on minute bars beside daily"
	@echo "history: python -m benchmarks.history   every run's row as tables (docs/history/README.md)"

bench-data: $(STAMP)
	$(BIN)/python -m benchmarks.perf.data

bench-train: $(STAMP)
	$(BIN)/python -m benchmarks.perf.train

# Before the device script runs on a GPU machine (docs/training.md, GPU workers): that machine has
# Python 3.12 and PyTorch but no dask and no network, so dask's wheels for it go into .whl/ (emptied
# first: a wheel of an old pin would be installed beside the new one), and the tree's stamp into
# .stamp/, by which the run names the commit it measured. Carry both folders to the machine.
gpu-prep: $(STAMP)
	rm -rf .whl
	$(BIN)/python -m pip download --quiet -d .whl --only-binary=:all: --python-version 3.12 --implementation cp \
	    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
	    -c constraints.txt dask distributed
	$(BIN)/python -m benchmarks.perf.tree

mlflow-ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow/mlflow.db --host 127.0.0.1 --port 5000

clean-data:
	find data -mindepth 1 ! -name README.md ! -name .gitignore -exec rm -rf {} +
	find mlflow -mindepth 1 ! -name README.md ! -name .gitignore -exec rm -rf {} +

clean: clean-data
	rm -rf $(VENV)
