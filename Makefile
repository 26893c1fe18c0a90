# FireFeed: `make demo` runs the sample project, `make test` runs the suite. Both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo demo-check test test-unit test-integration lint format typecheck bench bench-distributed bench-rules bench-api bench-processes stress clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/firefeed demo

# Issue 7 acceptance: a fresh clone of HEAD runs `make demo` in a network namespace without services (root).
demo-check:
	bash tests/fresh_clone_demo.sh

test: $(STAMP)
	$(BIN)/pytest -m "not stress" tests

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/pipeline_bench.py $(BENCH_ARGS)

# The other benchmarks (each prints its figures and targets; see the script's docstring).
bench-distributed: $(STAMP)
	$(BIN)/python bench/distributed_bench.py $(BENCH_ARGS)

bench-rules: $(STAMP)
	$(BIN)/python bench/rules_bench.py $(BENCH_ARGS)

bench-api: $(STAMP)
	$(BIN)/python bench/api_bench.py $(BENCH_ARGS)

bench-processes: $(STAMP)
	$(BIN)/python bench/processes_bench.py $(BENCH_ARGS)

stress: $(STAMP)
	$(BIN)/pytest -m stress tests/stress

clean:
	rm -rf $(VENV) firefeed-demo var exports .mypy_cache .ruff_cache
