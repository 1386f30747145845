# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs, each with its stamp: the coordinator alone (no extras: it never imports
# torch, so an operator does not wait for or store the engine's gigabytes), and everything
# the tests, benches and node-app build need (dev and engine extras). The full install
# holds the coordinator's too, so it marks both stamps; a newer pyproject.toml stales both.
CORE_STAMP := $(VENV)/.installed-core-stamp
FULL_STAMP := $(VENV)/.installed-full-stamp
PYTEST_ARGS ?=
# The suite runs in one worker process per CPU (pytest-xdist): in one process it kept one
# core busy and left the others idle (16 min against 9 on 2 cores). Each worker makes its own
# PostgreSQL scratch database; TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= auto
# Installs write each module's bytecode once: where PYTHONDONTWRITEBYTECODE is set (as on
# some CI and container images) every process would otherwise compile the libraries it
# imports again: `sis --help` took 3 s instead of 1.1-1.4, and the suite 21 min instead of 16
# (in one process, on 2 cores).
UV_INSTALL := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python

.PHONY: install install-full run demo test bench clean node-app node-app-check

$(VENV)/bin/uv:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv

$(CORE_STAMP): pyproject.toml | $(VENV)/bin/uv
	$(UV_INSTALL) -e .
	touch $(CORE_STAMP)

$(FULL_STAMP): pyproject.toml | $(VENV)/bin/uv
	$(UV_INSTALL) -e '.[dev,engine]'
	touch $(FULL_STAMP) $(CORE_STAMP)

## make install: the coordinator alone; make install-full: with the dev and engine extras
install: $(CORE_STAMP)

install-full: $(FULL_STAMP)

## make run: the coordinator on its embedded default (SQLite under var/), http://127.0.0.1:8080
run: install
	$(BIN)/sis serve

## make demo: the same, with sources answered from bundled recorded samples (offline), on a
## database of its own (DEMO_DB), so that `make run` afterwards serves none of the demo's data
DEMO_DB ?= sqlite+aiosqlite:///var/demo.db
demo: install
	$(BIN)/sis serve --demo --database $(DEMO_DB)

## make test: the whole suite; PostgreSQL tests run where SIS_TEST_DATABASE_URL names a server
test: install-full
	$(BIN)/python -m compileall -q coordinator node_agent sweep_engine bench >/dev/null
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

bench: install-full
	$(BIN)/python bench/api.py

## make node-app: the Nuitka build of the agent with the engine and weights inside (long: not part of make test)
node-app: install-full
	$(UV_INSTALL) -e '.[dev,engine,build]'
	$(BIN)/python build/node_app.py

## make node-app-check: run the built binary as volunteers would (--version, then one synthetic job on the CPU)
node-app-check: install-full
	$(BIN)/python build/check_node_app.py

clean:
	rm -rf $(VENV) var .pytest_cache
