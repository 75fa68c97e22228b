# Scroll: `make run` serves the console, `make test` runs every check CI runs.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
BENCH_EXTRAS := -e '.[dev,bench]'
PHOENIX_VERSION ?= 20.26.1
PHOENIX_VENV := .phoenix-venv
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION)
AIDER_VERSION ?= 0.86.2
AIDER_VENV := .aider-venv
AIDER_STAMP := $(AIDER_VENV)/.installed-$(AIDER_VERSION)
LITELLM_VERSION ?= 1.110.2
LITELLM_VENV := .litellm-venv
LITELLM_STAMP := $(LITELLM_VENV)/.installed-$(LITELLM_VERSION)
# (See `make litellm` below for why these and not the [proxy] extra.)
LITELLM_REQUIREMENTS := litellm==$(LITELLM_VERSION) \
	'uvicorn>=0.33,<1' 'uvloop>=0.22.1,<1' 'fastapi>=0.136.3,<1' 'starlette>=1.0.1,<2' \
	'backoff>=2.2.1,<3' 'gunicorn>=23,<24' 'rq>=2.7,<3' websockets orjson apscheduler \
	PyJWT cryptography semver python-multipart expression fastapi-sso mcp soundfile
# uv (PyPI's, Astral's Rust installer) installs every virtualenv below, in a small virtualenv
# of its own that pip makes: on this 2-core machine, from a cold cache, the project with its
# dev extra took 16 s and 18 CPU-s against pip's 122 s and 87 CPU-s; Phoenix 8 s against
# 110 s, Aider 3 s against 84 s (2026-12-05), and the four installs CI runs at once are bound
# by CPU. uv reads no pip.conf: an index of your own is UV_INDEX_URL / UV_DEFAULT_INDEX.
# Where uv cannot be installed, or fails to install something, pip does it (slower, and it
# says so): pip.conf's index then still works.
UV_VERSION ?= 0.13.8
UV_VENV := .uv-venv
UV := $(UV_VENV)/bin/uv
UV_STAMP := $(UV_VENV)/.installed-$(UV_VERSION)
# $(call install_into,PYTHON,WHAT[,UV_ONLY]): install WHAT (pip's arguments) into the
# virtualenv of PYTHON, with uv and UV_ONLY's options when there is uv, else with pip.
# Bytecode is compiled at install, as pip does: otherwise the first process to import a
# module compiles it, inside the test pass, which is bound by CPU too (Phoenix took 24 CPU-s
# to start without its .pyc files, 12 with them). The system's certificate store, not uv's
# built-in roots, as pip does: a proxy's own CA works.
install_into = if [ -x $(UV) ] && $(UV) pip install --quiet --system-certs --compile-bytecode \
	--python $(1) $(3) $(2); then :; else \
	echo "!! installing with pip instead of uv: $(2)" >&2; $(1) -m pip install --quiet $(2); fi
HOST ?= 127.0.0.1
PORT ?= 8000

# Python writes and reuses bytecode, and pytest its rewritten test modules, even where the
# environment says not to (PYTHONDONTWRITEBYTECODE=1, as in many containers and on this
# machine): otherwise every test process and every server or worker a test starts compiles
# the project from source again (6 of the 13 CPU seconds each pytest process spends
# collecting, 0.15 s of each server's start).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: uv install run run-uvicorn worker test test-embedded test-scaled lint fmt typecheck bench phoenix aider litellm

install: $(STAMP)

uv: $(UV_STAMP)

$(UV_STAMP):
	@test -x $(UV_VENV)/bin/python || $(PYTHON) -m venv $(UV_VENV)
	@if $(UV_VENV)/bin/python -m pip install --quiet uv==$(UV_VERSION); then touch $@; \
	else echo "!! could not install uv $(UV_VERSION): pip installs the virtualenvs" >&2; fi

# The modules setup.py compiles with mypyc (scroll_core/native.py's COMPILED), as paths: the
# tuple's names with dots made slashes (scroll_core.store.term_match -> .../term_match.py).
NATIVE_SOURCES := $(shell sed -n '/^COMPILED = ($$/,/^)$$/s|^    "\(scroll_core\..*\)",$$|\1|p' \
	scroll_core/native.py | tr . / | sed 's|$$|.py|')

# Reinstall only when pyproject.toml or setup.py changed since the last install, or a compiled
# module's source (whose extension is built again then; until it is, the package runs the
# sources: scroll_core/native.py). uv would reuse its cached build of the project while
# pyproject.toml and setup.py are unchanged, so the project is always built again.
$(STAMP): pyproject.toml setup.py scroll_core/native.py $(NATIVE_SOURCES) | $(UV_STAMP)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(call install_into,$(BIN)/python,-e '.[dev]',--reinstall-package scroll)
	@touch $(STAMP)

run: install
	$(BIN)/python manage.py migrate --noinput
	@echo ""
	@echo "  Scroll console: http://$(HOST):$(PORT)/  (log in as admin; the password is"
	@echo "  printed below when the account is first created, and kept in $${SCROLL_DATA_DIR:-var}/admin_password)"
	@echo ""
	SCROLL_DEMO=1 $(BIN)/python manage.py runserver $(HOST):$(PORT)

# The same console under uvicorn (uvloop, httptools, websockets) instead of daphne: an option,
# tested by tests/test_uvicorn_option.py and timed beside daphne by bench/gateway.py. Scroll
# writes the request lines itself (dashboard/logs.py), so uvicorn's would repeat them.
run-uvicorn: install
	$(BIN)/python manage.py migrate --noinput
	SCROLL_DEMO=1 $(BIN)/uvicorn --host $(HOST) --port $(PORT) --loop uvloop --http httptools \
		--ws websockets --lifespan off --no-access-log dashboard.asgi:application

# A worker process, for web processes started with SCROLL_WORKERS=external (and Redis).
worker: install
	$(BIN)/python manage.py scroll_worker

# The suite on the embedded default (SQLite, in-memory channel layer), then again with the
# console database on a throwaway PostgreSQL and the channel layer on a throwaway Redis
# (Debian's postgresql and redis-server, started on loopback by tests/servers.py). Without
# them the second pass warns and is skipped, except under CI=true where it fails. The second
# pass runs only the tests those backends can change (the console_backend mark, which
# tests/conftest.py sets from what each test uses, less the modules marked
# same_on_every_backend); the rest would repeat the first pass.
# Both passes run in parallel (pytest-xdist) and print their 30 slowest tests. One worker more
# than there are cores: tests wait on the servers and kernels they start, and the spare worker
# keeps the cores busy (on 2 cores: 473 s -> 440 s for the first pass); worksteal moves
# queued tests to whichever worker is idle, so one long test does not hold up the end.
# More did not pay (2026-12-04, 2 cores): a fourth worker 890 s against 878 s for the first
# pass, and both passes at once 23 min against about 20 one after the other, with a test of
# a live refresh failing under that load (since made to wait for it: tests/test_consumers.py).
# The first pass is bound by CPU, not by waits or by how the tests are dealt out (2026-12-04,
# 2 cores, vmstat every 5 s over the pass: 68% user, 23% system, 3% idle, 5% stolen; the
# three workers' last tests ended within 1.3 s of each other): only less work shortens it.
# The largest such work was Django's password hasher (0.3 s of CPU per user made, in about
# 260 tests): the suite runs under tests/settings.py, which hashes with MD5 (first pass
# 587 -> 526 s, 2026-12-05).
XDIST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PYTEST_ARGS ?= -n $(XDIST_WORKERS) --dist worksteal --durations=30

# mypy (30-45 s from a clean checkout, one core) checks the types while the first pass runs,
# which leaves a core idle while it waits on its servers and kernels; a type error still fails
# `make test`, once that pass ends.
test: install lint
	$(MAKE) --no-print-directory -j2 typecheck test-embedded
	$(MAKE) --no-print-directory test-scaled

# Both passes keep their temporary files (logs, the servers' data, fresh databases) on a RAM
# filesystem when the machine has one to spare (tests/ram_tmp.py: the embedded pass 444
# against 500 s on disk, 2026-12-05); TEST_TMPDIR= (empty) keeps the default folder.
TEST_TMPDIR ?= $(shell $(PYTHON) tests/ram_tmp.py)
WITH_TMPDIR = $(foreach dir,$(TEST_TMPDIR),TMPDIR=$(dir) )

test-embedded: install
	$(WITH_TMPDIR)$(BIN)/pytest $(PYTEST_ARGS)

test-scaled: install
	$(WITH_TMPDIR)$(BIN)/python -m tests.servers $(BIN)/pytest $(PYTEST_ARGS) -m console_backend

# Arize Phoenix for tests/test_phoenix.py, which reads a gateway session's spans back from it,
# in a virtualenv of its own (git ignores it): its many pinned dependencies are not Scroll's.
# Without it that test skips, except under CI=true, where .ci/run installs it first.
phoenix: $(PHOENIX_STAMP)

$(PHOENIX_STAMP): | $(UV_STAMP)
	@test -x $(PHOENIX_VENV)/bin/python || $(PYTHON) -m venv $(PHOENIX_VENV)
	$(call install_into,$(PHOENIX_VENV)/bin/python,arize-phoenix==$(PHOENIX_VERSION))
	@touch $@

# Aider (PyPI's aider-chat) for tests/test_gateway_aider.py, which runs the real CLI through the
# gateway, in a virtualenv of its own (git ignores it): it pins openai 2.x and numpy 1.x, where
# Scroll has openai 3 and numpy 2. Without it that test skips, except under CI=true.
aider: $(AIDER_STAMP)

$(AIDER_STAMP): | $(UV_STAMP)
	@test -x $(AIDER_VENV)/bin/python || $(PYTHON) -m venv $(AIDER_VENV)
	$(call install_into,$(AIDER_VENV)/bin/python,aider-chat==$(AIDER_VERSION))
	@touch $@

# LiteLLM's proxy for `bench/gateway.py --peers litellm` (Scroll's throughput beside it), in a
# virtualenv of its own (git ignores it). Its [proxy] extra pins a litellm-proxy wheel that the
# registry does not have, though the proxy ships inside litellm itself: the extra's other
# requirements are named here, with the modules the proxy imports at start. Never 1.107.0
# (a compromised release).
litellm: $(LITELLM_STAMP)

$(LITELLM_STAMP): | $(UV_STAMP)
	@test -x $(LITELLM_VENV)/bin/python || $(PYTHON) -m venv $(LITELLM_VENV)
	$(call install_into,$(LITELLM_VENV)/bin/python,$(LITELLM_REQUIREMENTS))
	LITELLM_LOCAL_MODEL_COST_MAP=True $(LITELLM_VENV)/bin/python -c 'import litellm.proxy.proxy_server, \
		litellm.proxy.proxy_cli, litellm.proxy.mcp_server.outbound_credentials.resolver'
	@touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every bench/<name>.py (not the _helpers nor readme_tables.py) with --json, each into
# bench/results/<name>.json, then the figure tables of README.md and docs/*.md from those files.
# BENCH_ARGS=--quick for a short run (passed to the benches that take it).
BENCHES ?= $(filter-out bench/readme_tables.py,$(wildcard bench/[!_]*.py))

# The benches also need the optional [bench] extra (a Jupyter kernel for bench/kernel.py).
$(BENCH_STAMP): $(STAMP)
	$(call install_into,$(BIN)/python,$(BENCH_EXTRAS))
	@touch $(BENCH_STAMP)

bench: install $(BENCH_STAMP)
	@mkdir -p bench/results
	@set -e; for script in $(BENCHES); do \
		name=$$(basename $$script .py); args="$(BENCH_ARGS)"; \
		grep -q -- '"--quick"' $$script || args=$$(echo " $$args " | sed 's/ --quick / /'); \
		echo "== $$script --json $$args -> bench/results/$$name.json"; \
		$(BIN)/python $$script --json $$args > bench/results/$$name.json.tmp; \
		mv bench/results/$$name.json.tmp bench/results/$$name.json; \
	done
	$(BIN)/python bench/readme_tables.py
