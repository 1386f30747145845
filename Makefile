# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install run demo test test-postgres bench clean node-app node-app-check

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,engine]'
	touch $(STAMP)

install: $(STAMP)

## make run: the coordinator on its embedded default (SQLite under var/), http://127.0.0.1:8080
run: install
	$(BIN)/sis serve

## make demo: the same, with sources answered from bundled recorded samples (offline), on a
## database of its own (DEMO_DB), so that `make run` afterwards serves none of the demo's data
DEMO_DB ?= sqlite+aiosqlite:///var/demo.db
demo: install
	$(BIN)/sis serve --demo --database $(DEMO_DB)

## make test: the whole suite; PostgreSQL tests run where SIS_TEST_DATABASE_URL names a server
test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/api.py

## make node-app: the Nuitka build of the agent with the engine and weights inside (long: not part of make test)
node-app: install
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev,engine,build]'
	$(BIN)/python build/node_app.py

## make node-app-check: run the built binary as volunteers would (--version, then one synthetic job on the CPU)
node-app-check: install
	$(BIN)/python build/check_node_app.py

clean:
	rm -rf $(VENV) var .pytest_cache
