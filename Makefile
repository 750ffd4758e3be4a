# Two entry points, both self-contained on a machine with only Python 3.11:
#   make run    set up .venv and run `cl-bench run` on the embedded default
#   make test   set up .venv and run the tests
#   make test-fast  the unit tests only (tests/unit/, under a minute)
#   make docs   set up .venv and build the documentation site into site/ (mkdocs.yml)
#   make lint   set up .venv and check the code: ruff (lint, formatting) and mypy
# The environment comes from the lock (requirements/lock.txt): every package of the
# dependency tree at the version it was resolved at; `python scripts/lock.py refresh`
# re-resolves it (docs/getting-started.md, "The locked environment").
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
LOCK   := requirements/lock.txt

.PHONY: run test test-fast docs lint setup

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c $(LOCK) -e '.[dev]'
	$(BIN)/python scripts/lock.py verify
	touch $@

run: setup
	$(BIN)/cl-bench run

test: setup
	$(BIN)/pytest -q

test-fast: setup
	$(BIN)/pytest -q tests/unit

docs: setup
	$(BIN)/mkdocs build --strict

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
