# The two commands of the README: `make demo` and `make test`. Each works from a fresh clone:
# it creates .venv (no system site packages), installs vcemu with its generated gRPC code, and runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The tested versions of every package (pip -c): the same install today and tomorrow. `make constraints` renews it.
CONSTRAINTS := constraints.txt

.PHONY: install demo test lint unit clean system-packages constraints

$(STAMP): pyproject.toml setup.py $(CONSTRAINTS) $(wildcard proto/vcemu/v1/*.proto)
	@# A venv whose creation failed (Debian without python3-venv: no ensurepip) leaves .venv/bin/python behind with
	@# no pip in it: start it again rather than fail on "No module named pip" once python3-venv is installed.
	$(BIN)/python -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PY) -m venv $(VENV); } || \
	  { rm -rf $(VENV); echo "could not create $(VENV): on Debian or Ubuntu, apt-get install python3-venv" >&2; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip -c $(CONSTRAINTS)
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) -e '.[dev]'
	$(BIN)/python -m coordinator.warmup  # compiles the policies' numba kernels into numba's disk cache
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/vcemu demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

unit: install
	$(BIN)/python -m pytest -q -n 2 tests/unit

# System packages tests use: Prometheus (/usr/bin/prometheus) for tests/e2e/test_prometheus_dashboard.py.
# Installed only when missing and we are root with apt-get; failing is not fatal (the test then skips
# with its reason). Debian's package also tries to start a prometheus service; nothing here relies on it
# (the test starts its own server on an ephemeral port), and without systemd as PID 1 it does not start.
system-packages:
	@if [ ! -x /usr/bin/prometheus ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing the Debian package prometheus (for the dashboard test)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    prometheus) || echo "warning: could not install prometheus; its test will skip"; \
	fi

# Two phases, to keep the suite well under 15 minutes: the unit tests (pure, or each in its own temporary
# directory and ports) on both cores with pytest-xdist (about 225 s on a 2-core machine); then the integration
# and e2e tests one at a time, because they start real agents whose start-up sweeps and CPU-share measurements
# assume no other agent is starting beside them. Each phase lists its slowest tests.
test: lint system-packages
	$(BIN)/python -m pytest -q -ra -n 2 --durations=10 tests/unit
	$(BIN)/python -m pytest -q -ra --durations=25 tests/integration tests/e2e

# Renews constraints.txt: the newest versions pyproject.toml's ranges allow today, resolved in a venv of their own
# (not .venv). Then run `make test` on them and commit the file with the fixes they need.
constraints:
	rm -rf .venv-constraints && $(PY) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install -q --upgrade pip
	.venv-constraints/bin/python -m pip install -q -e '.[dev]'
	{ sed -n '/^#/p' $(CONSTRAINTS); .venv-constraints/bin/python -m pip freeze --all --exclude-editable; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS) && rm -rf .venv-constraints

clean:
	rm -rf $(VENV) build *.egg-info vcemu/v1/*_pb2*.py vcemu/v1/*_pb2*.pyi
