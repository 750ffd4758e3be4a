# Two entry points, both self-contained on a machine with only Python 3.11:
#   make run    set up .venv and run `cl-bench run` on the embedded default
#   make test   set up .venv and run the tests
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test setup

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

run: setup
	$(BIN)/cl-bench run

test: setup
	$(BIN)/pytest -q
