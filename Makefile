# GPU Portal — the two commands: `make run` (the demo) and `make test` (everything CI checks).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
JS_STAMP := node_modules/.installed

.PHONY: install run test lint typecheck test-only bench bench-engine bench-pipeline bench-reports bench-api bench-estimates bench-streams clean

$(PY_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

$(JS_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

install: $(PY_STAMP) $(JS_STAMP)

run: install
	$(BIN)/python manage.py run_portal

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy .
	$(BIN)/lint-imports

test: install lint typecheck
	$(BIN)/python manage.py makemigrations --check --dry-run
	DEBUG=false SECRET_KEY=check-deploy-only-$$RANDOM$$RANDOM$$RANDOM$$RANDOM$$RANDOM-not-a-secret \
	  ALLOWED_HOSTS=portal.example.com $(BIN)/python manage.py check --deploy --fail-level WARNING
	$(BIN)/pytest

test-only: install
	$(BIN)/pytest

bench: bench-engine bench-pipeline bench-reports bench-api bench-estimates bench-streams

# The engine in memory, then the real cycle on PostgreSQL (BENCH_DATABASE_URL, recreated).
bench-engine: install
	$(BIN)/python -m bench.engine
	$(BIN)/python -m bench.engine_db
	$(BIN)/python -m bench.replay
	$(BIN)/python -m bench.fragmentation

bench-pipeline: install
	$(BIN)/python -m bench.pipeline

bench-reports: install
	$(BIN)/python -m bench.reports $(if $(ROWS),--rows $(ROWS),)

# Start estimates: a generated week replayed through the engine, estimates against actual starts.
bench-estimates: install
	$(BIN)/python -m bench.estimates $(if $(DAYS),--days $(DAYS),)

# API load: a compiled load generator (bench/loadgen, Go) against gunicorn + PostgreSQL (BENCH_API_DATABASE_URL, recreated) on loopback.
bench-api: install
	$(BIN)/python -m bench.api $(if $(SECONDS_PER_SCENARIO),--seconds $(SECONDS_PER_SCENARIO),)

# The web tier under followed logs: page and workload-auth p99 with 0 and FOLLOWERS (50) open
# streams, on the ASGI server as deployed + PostgreSQL (BENCH_STREAMS_DATABASE_URL, recreated).
bench-streams: install
	$(BIN)/python -m bench.streams $(if $(FOLLOWERS),--followers $(FOLLOWERS),)

clean:
	rm -rf $(VENV) node_modules staticfiles var .mypy_cache .ruff_cache .pytest_cache

.PHONY: testbed testbed-build bench-e2e bench-launches

# The real Kubernetes test bed (docs/testbed.md): build the binaries once per version into
# ~/.cache/gpu-portal-testbed/<version>/bin, then start etcd, the control plane and kwok.
testbed: testbed-build
	$(BIN)/python -m scripts.testbed --no-build

# Build only (what CI runs before `make test`): nothing to do when the binaries are cached.
testbed-build: install
	GOFLAGS=-p=1 bash scripts/testbed/build.sh
	bash scripts/testbed/build-kueue.sh
	bash scripts/testbed/build-helm.sh

# The portal end to end on the test bed (API, PostgreSQL BENCH_E2E_DATABASE_URL recreated, Redis
# db 12, a Celery worker) against the same pods created straight through the API server, then
# NOTEBOOKS (50) users opening a notebook at once.
bench-e2e: testbed-build
	$(BIN)/python -m bench.e2e $(if $(REQUESTS),--requests $(REQUESTS),) $(if $(RATE),--rate $(RATE),)
	$(BIN)/python -m bench.e2e --notebooks $(or $(NOTEBOOKS),50)

# One notebook launch at a time on a test bed of its own: its API calls, SQL and CPU.
bench-launches: testbed-build
	$(BIN)/python -m bench.launches $(if $(LAUNCHES),--launches $(LAUNCHES),)
