# POP: the two commands are `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/pop
# pytest-xdist processes for `make test`, each on its own test database (0: one process).
TEST_WORKERS ?= 2

.PHONY: run test venv lint format bench cluster-demo clean

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.installed

## Demo on SQLite: migrate, demo data, web + scheduler + demo workers. Ctrl-C stops all.
run: venv
	./scripts/run-demo.sh

## The whole suite against PostgreSQL (DATABASE_URL, default $(TEST_DATABASE_URL)),
## in TEST_WORKERS processes.
test: venv
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) scripts/check_database.py
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} SECRET_KEY=test-secret \
		$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## Benchmarks against the raw limit and the peers, figures into bench/RESULTS.md;
## BENCH_ARGS=--quick for the short form. Needs PostgreSQL and Redis on 127.0.0.1.
bench: venv
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) -m bench.compare $(BENCH_ARGS)

## Scale-out run: 2 web nodes, 2 qclusters, 4 workers, one killed of each midway.
cluster-demo: venv
	$(PY) scripts/cluster_demo.py $(DEMO_ARGS)

clean:
	rm -rf $(VENV) db.sqlite3 db.sqlite3-* staticfiles test-output
