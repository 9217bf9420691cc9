# Set-up is two commands: `make run` serves on SQLite, `make test` runs the checks.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
HOST ?= 127.0.0.1
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: install run test test-fast test-pg lint docs docs-serve bench clean

# Python keeps the project's compiled modules (and pytest its rewritten tests) in
# __pycache__/ (ignored by git), though the environment may say otherwise: every test
# process (the pytest workers, each live gunicorn, each svcctl and manage.py run) would
# compile the project from source at its start, minutes of a `make test`.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

install: $(BIN)/.installed
	@mkdir -p var staticfiles

# Development defaults (secret key, admin key, a root key that certifies the signing
# key) live in var/, created on first run; dev_setup writes what the server runs with to
# var/dev.env, which config/settings.py reads (so do `python manage.py ...` commands run
# by hand). Variables set in the environment win. A real root key lives offline.
# The webhook worker (deliver_events) runs beside gunicorn and stops with it; in
# development webhooks may point at http:// and local receivers.
run: install
	SVC_DEBUG=1 SVC_ROOT_KEYS= $(PY) manage.py migrate --noinput -v 0
	SVC_DEBUG=1 SVC_ROOT_KEYS= $(PY) manage.py dev_setup --url http://$(HOST):$(PORT)
	SVC_DEBUG=1 $(PY) manage.py collectstatic --noinput -v 0
	rm -rf var/metrics
	export SVC_ENV_FILE=var/dev.env SVC_WEBHOOK_ALLOW_HTTP=1 SVC_WEBHOOK_ALLOW_PRIVATE=1 \
	  SVC_METRICS_DIR=var/metrics; \
	$(PY) manage.py deliver_events & worker=$$!; \
	trap 'kill $$worker 2>/dev/null' EXIT INT TERM; \
	$(BIN)/gunicorn config.wsgi --bind $(HOST):$(PORT) --workers 2 --access-logfile -

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	SVC_DEBUG=1 $(PY) manage.py makemigrations --check --dry-run

# Everything: the quick tests on every core, then the slow ones (real servers, kill -9,
# browsers) on every core too, the longest first (tests/conftest.py LONGEST_FIRST), each
# worker stealing from another's queue when it is done. Two runs, two processes: a slow
# test that cuts the database under a live server leaves no state behind for a quick
# one. No test depends on a core being free (a window or an expiry is the server's
# clock's).
test: lint
	$(BIN)/pytest -q -m "not slow" -n auto
	$(BIN)/pytest -q -m slow -n auto --dist worksteal

# The suite without the slow tests (real servers, fuzzing, scale, README), on every
# core, for the edit-test loop (112 s in CI on a 2-core machine, 2026-11-28). `make test` runs
# everything.
test-fast: install
	$(BIN)/pytest -q -m "not slow" -n auto

# The suite's database tests on PostgreSQL (the production database); the tests that
# touch no database ran in `make test` (tests/conftest.py, SVC_TEST_DATABASE_ONLY).
test-pg: install
	DATABASE_URL=$(PG_URL) SVC_TEST_DATABASE_ONLY=1 $(BIN)/pytest -q -m "not slow" -n auto
	DATABASE_URL=$(PG_URL) SVC_TEST_DATABASE_ONLY=1 $(BIN)/pytest -q -m slow -n auto --dist worksteal

# docs/ as a site (MkDocs Material) in site/; --strict: a broken link or anchor fails.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) staticfiles site .pytest_cache
