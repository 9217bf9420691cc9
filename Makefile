# Set-up is two commands: `make run` serves on SQLite, `make test` runs the checks.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
HOST ?= 127.0.0.1
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: install run test test-pg lint bench clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

install: $(BIN)/.installed
	@mkdir -p var staticfiles

# Development defaults (secret key, admin key, a root key that certifies the signing
# key) live in var/, created on first run. A real root key lives offline.
run: install
	SVC_DEBUG=1 SVC_ROOT_KEYS= $(PY) manage.py migrate --noinput -v 0
	SVC_DEBUG=1 SVC_ROOT_KEYS= $(PY) manage.py dev_setup --url http://$(HOST):$(PORT)
	SVC_DEBUG=1 $(PY) manage.py collectstatic --noinput -v 0
	SVC_SECRET_KEY="$$(cat var/secret-key)" \
	SVC_ADMIN_KEY="$${SVC_ADMIN_KEY:-$$(cat var/admin-key)}" \
	SVC_ACTIVATION_ALLOWLIST="$${SVC_ACTIVATION_ALLOWLIST:-}" \
	SVC_ROOT_KEYS=var/root-key.pub \
	SVC_SSL_REDIRECT=0 SVC_SECURE_COOKIES=0 SVC_HSTS_SECONDS=0 \
	$(BIN)/gunicorn config.wsgi --bind $(HOST):$(PORT) --workers 2 --access-logfile -

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	SVC_DEBUG=1 $(PY) manage.py makemigrations --check --dry-run

test: lint
	$(BIN)/pytest -q

# The same suite on PostgreSQL (the production database).
test-pg: install
	DATABASE_URL=$(PG_URL) $(BIN)/pytest -q

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) staticfiles .pytest_cache
