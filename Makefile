# FireFeed: `make demo` runs the sample project, `make test` runs the suite. Both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install bytecode system-deps lock demo demo-check test test-check test-rabbitmq test-unit test-integration lint format typecheck bench bench-distributed bench-concurrency bench-rules bench-api bench-processes bench-preview bench-quality bench-lists bench-feeds bench-sync bench-incremental stress clean

# From the lock file (tools/install.sh: uv when it can be had, else pip); tools/lock.sh re-resolves it.
$(STAMP): pyproject.toml requirements-dev.lock
	PYTHON=$(PYTHON) bash tools/install.sh $(VENV)
	touch $(STAMP)

install: $(STAMP)

lock:
	bash tools/lock.sh

demo: $(STAMP) bytecode
	$(BIN)/firefeed demo

# Issue 7 acceptance: a fresh clone of HEAD runs `make demo` in a network namespace without services (root).
demo-check:
	bash tests/fresh_clone_demo.sh

# system-deps: Chromium and promtool, which some tests drive (installed when missing, as root).
system-deps:
	bash tools/system-deps.sh

# The project's bytecode, fresh for the processes the demo and the tests start (tools/compile_runtime.py says why).
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 firefeed tests celeryconfig.py >/dev/null

# On 2 pytest-xdist workers, each test file whole on one (its module fixtures start workers and servers
# once); each worker is a session of its own: its database, its Redis, its share of ports (tests/services.py,
# tests/ports.py). TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= 2
test: $(STAMP) bytecode system-deps
	$(BIN)/pytest -m "not stress" --durations=30 -n $(TEST_WORKERS) --dist loadfile tests

# Issue #48 acceptance: a fresh clone of HEAD, nothing beside it, runs `make test` in a network namespace (root).
test-check:
	bash tests/fresh_clone_test.sh

# The integration tests that touch Celery, on RabbitMQ instead of Redis (CI runs both).
RABBITMQ_URL ?= amqp://guest:guest@127.0.0.1:5672//
test-rabbitmq: $(STAMP) bytecode
	FIREFEED_TEST_BROKER=$(RABBITMQ_URL) $(BIN)/pytest -m "not stress" tests/integration/test_distributed.py \
		tests/integration/test_pipeline_lock.py tests/integration/test_ops_fleet.py \
		tests/integration/test_ops_deploy.py tests/integration/test_ops_schedules.py tests/integration/test_api.py

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

lint: $(STAMP)
	$(BIN)/python tools/check_lock.py
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP) bytecode
	$(BIN)/python bench/pipeline_bench.py $(BENCH_ARGS)

# The other benchmarks (each prints its figures and targets; see the script's docstring).
bench-distributed: $(STAMP) bytecode
	$(BIN)/python bench/distributed_bench.py $(BENCH_ARGS)

# Inter-project concurrency: 20 projects with slow feed servers, PIPELINE_CONCURRENCY=4 against 1.
bench-concurrency: $(STAMP) bytecode
	$(BIN)/python bench/concurrency_bench.py $(BENCH_ARGS)

bench-rules: $(STAMP) bytecode
	$(BIN)/python bench/rules_bench.py $(BENCH_ARGS)

bench-api: $(STAMP) bytecode
	$(BIN)/python bench/api_bench.py $(BENCH_ARGS)

bench-processes: $(STAMP) bytecode
	$(BIN)/python bench/processes_bench.py $(BENCH_ARGS)

bench-preview: $(STAMP) bytecode
	$(BIN)/python bench/preview_bench.py $(BENCH_ARGS)

bench-quality: $(STAMP) bytecode
	$(BIN)/python bench/quality_bench.py $(BENCH_ARGS)

# Per-element list actions on one item's list of N and 4N elements: linear is ~4x (#47).
bench-lists: $(STAMP) bytecode
	$(BIN)/python bench/list_actions_bench.py $(BENCH_ARGS)

# SPEC 10 C5: a 1M-item google-xml (~1.3 GB) at its feed URL behind `firefeed api`: 4 full fetches against cat, 304s/s.
bench-feeds: $(STAMP) bytecode
	$(BIN)/python bench/feeds_bench.py $(BENCH_ARGS)

# Channel API sync (#51): --items products to the Merchant API stand-in at 3,000 requests/min (BENCH_ARGS=--items 10000).
bench-sync: $(STAMP) bytecode
	$(BIN)/python bench/sync_bench.py $(BENCH_ARGS)

# Refreshes (#52): a no-op, 1% and stock-only refresh of the 1M feed against its full run, and the Polars anchor.
bench-incremental: $(STAMP) bytecode
	$(BIN)/python bench/incremental_bench.py $(BENCH_ARGS)

# The stress suites, then the SQL route's property tests with every example (make test tries half).
stress: $(STAMP) bytecode
	$(BIN)/pytest -m stress tests
	FIREFEED_THOROUGH_PROPERTIES=1 $(BIN)/pytest -m "not stress" tests/integration/test_rules_differential.py \
		tests/integration/test_rules_size.py tests/integration/test_refresh_differential.py

clean:
	rm -rf $(VENV) firefeed-demo var exports .mypy_cache .ruff_cache
