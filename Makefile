# Scroll: `make run` serves the console, `make test` runs every check CI runs.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test lint fmt typecheck bench

install: $(STAMP)

# Reinstall only when pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: install
	$(BIN)/python manage.py migrate --noinput
	@echo ""
	@echo "  Scroll console: http://$(HOST):$(PORT)/  (log in as admin; the password is"
	@echo "  printed below when the account is first created, and kept in var/admin_password)"
	@echo ""
	SCROLL_DEMO=1 $(BIN)/python manage.py runserver $(HOST):$(PORT)

test: install lint typecheck
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every bench/<name>.py (not the _helpers); BENCH_ARGS=--quick for a short run.
bench: install
	@set -e; found=0; for script in bench/[!_]*.py; do \
		[ -e "$$script" ] || continue; found=1; \
		echo "== $$script"; $(BIN)/python $$script $(BENCH_ARGS); \
	done; [ $$found = 1 ] || echo "no benchmarks yet (bench/*.py)"
