# sandgrid: one place for the commands. Run as root on Debian 12.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
LOCAL := deploy/local

.PHONY: up down down-all services registry-gc install lint typecheck test test-unit bench ci compose-check

up:            ## services + grid + the main job (one command from a bare machine)
	$(LOCAL)/up.sh

down:          ## stop the scheduler, workers and Flower started by `make up`
	$(LOCAL)/down.sh

down-all:      ## also stop the registry, Redis, MinIO and dockerd
	$(LOCAL)/down.sh --all

services:      ## Docker (+runsc), Redis, MinIO, images, .venv: what the tests need
	$(LOCAL)/services.sh

registry-gc:   ## the image registry's garbage-collect (untagged manifests, unreferenced blobs)
	$(LOCAL)/registry.sh gc

compose-check: ## docker-compose.yml up, main job + batch against it, down, nothing left
	$(LOCAL)/compose.sh check

install:
	$(LOCAL)/python.sh

lint:
	$(VENV)/bin/ruff check sandgrid scheduler worker tests bench
	$(VENV)/bin/ruff format --check sandgrid scheduler worker tests bench
	$(VENV)/bin/lint-imports

typecheck:
	$(VENV)/bin/mypy

test: services ## the test command: services up, then the whole suite
	CI=$${CI:-false} $(VENV)/bin/pytest -q tests

test-unit:
	$(VENV)/bin/pytest -q tests/unit

bench:         ## benchmarks; each prints its figures and ratios
	$(PY) bench/bench_exec.py
	$(PY) bench/bench_snapshots.py
	$(PY) bench/bench_grid.py
	$(PY) bench/bench_batch.py
	$(PY) bench/bench_fresh.py
	$(PY) bench/bench_bfcl.py
	$(PY) bench/bench_writes.py
	$(PY) bench/bench_integrations.py
	$(PY) bench/bench_ports.py
	$(PY) bench/bench_browser.py
	$(PY) bench/bench_memory.py
	$(PY) bench/bench_scale.py
	$(PY) bench/bench_templates.py

ci: services lint typecheck compose-check test
