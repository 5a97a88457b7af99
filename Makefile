# Two entry points: `make demo` and `make test`. Both set up the virtualenv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# uv installs the locked wheels in parallel (about 1 minute on a fresh 2-core machine where
# pip took 3); --no-deps because the lock names every package, and `pip check` then proves
# the lock satisfies every requirement, pyproject.toml's ranges included. Where uv cannot
# be installed or fails, pip installs the same lock (slower).
UV_VERSION := 0.13.8
# The cores this process may use (a container's share, not the host's).
CORES := $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)))')
# The demo's own home, not an exported one (a real store); `make demo SLACKQUERY_HOME=DIR`
# still picks another.
SLACKQUERY_HOME := $(CURDIR)/.slackquery/demo
export SLACKQUERY_HOME

.PHONY: setup demo test lint format clean

$(STAMP): pyproject.toml setup.py $(wildcard serving/*.c) requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==$(UV_VERSION) \
		&& $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode --no-deps \
			-r requirements.lock -e '.[dev]' \
		|| $(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	$(BIN)/pip check
	$(BIN)/python -m slackquery.duckdb_setup
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m slackquery.demo

# sqlfluff's dbt templater skips macro files: their SQL is linted where models call them.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/sqlfluff lint --processes $(CORES) models data-tests

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BIN)/sqlfluff fix models data-tests

# One pytest worker per core (pytest-xdist): the suite is CPU-bound (a third worker on 2
# cores did not help: 924 s against 903 s; again with tests/conftest.py's scheduler, wall
# time over CPU time stayed 0.59). Each worker builds the session fixtures its
# tests use in its own temporary folders; tests/conftest.py's scheduler keeps the tests of
# each expensive one on one worker, so it is built once.
#
# The suite starts about a hundred Python processes of the project's own (CLI runs, servers,
# crash tests). Where PYTHONDONTWRITEBYTECODE is set (this project's machines set it), none
# of them may cache the bytecode of the modules it compiles, so each compiled them all again
# (up to 0.7 s of CPU for one that imports most of the project): they are compiled once here
# (what is already compiled and unchanged is skipped), and Python reads bytecode whatever
# that variable says.
test: lint
	$(BIN)/python -m compileall -q slackquery serving flows expectations tests
	$(BIN)/pytest -n auto

clean:
	rm -rf $(VENV) .slackquery target dbt_packages logs .pytest_cache .ruff_cache build serving/*.so
