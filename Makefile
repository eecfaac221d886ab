# POP: the two commands are `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/pop

.PHONY: run test venv lint format bench clean

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

## The whole suite against PostgreSQL (DATABASE_URL, default $(TEST_DATABASE_URL)).
test: venv
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) scripts/check_database.py
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} SECRET_KEY=test-secret \
		$(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) db.sqlite3 db.sqlite3-* staticfiles test-output
