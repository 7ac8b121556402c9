# The two commands of the README: `make demo` and `make test`. Each works from a fresh clone:
# it creates .venv (no system site packages), installs vcemu with its generated gRPC code, and runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test lint unit clean

$(STAMP): pyproject.toml setup.py $(wildcard proto/vcemu/v1/*.proto)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/vcemu demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

unit: install
	$(BIN)/python -m pytest -q tests/unit

test: lint
	$(BIN)/python -m pytest -q -ra

clean:
	rm -rf $(VENV) build *.egg-info vcemu/v1/*_pb2*.py vcemu/v1/*_pb2*.pyi
