# `make demo` and `make test` are the README's two commands: each sets up .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: setup compile demo test test-tools lint docs fuzz soak histories bench bench-restate-setup schemas clean

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(INSTALLED)

# Bytecode for the project and its venv, written even where PYTHONDONTWRITEBYTECODE is set (the
# development VM sets it): without it no bytecode is cached there, every process compiles what
# it imports from source, and the benches' hand-written workflows, which run in the SDK's
# sandbox, compile their modules again for every run (milliseconds of CPU each).
# Python checks each file's bytecode against its source, so an edited module is compiled again.
PACKAGES := coord models workflows activities infra starter bench worker.py

compile: $(INSTALLED)
	$(BIN)/python -m compileall -q $(PACKAGES) $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

setup: $(INSTALLED) compile

demo: $(INSTALLED)
	$(BIN)/coord demo $(ARGS)

# Three test processes, each with its own session's dev and test servers, on CI's two cores:
# most of a test's time is waiting (on the server, a timer, a worker killed and replaced), and
# the suite keeps the two cores about 60 percent busy with three (798 s with two, 551 with three
# on the same machine).
TEST_JOBS ?= 3

# The 25 slowest tests close the run's output: where a slow CI run spent its time.
test: $(INSTALLED) lint test-tools
	$(BIN)/pytest -n $(TEST_JOBS) --dist worksteal --durations=25

# The dashboard's tests render its page in headless Chromium and query a real Prometheus server
# (docs/dashboard.md): Debian's packages, installed when missing if run as root; elsewhere those
# tests skip, saying which is missing.
TEST_TOOLS := chromium prometheus
test-tools:
	@missing=""; for tool in $(TEST_TOOLS); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	elif [ -n "$$missing" ]; then \
		echo "not installed:$$missing (run as root, or install them: the dashboard's tests of them skip)"; \
	fi

# ruff (with its complexity and naming rules), mypy strict, and the layers (import-linter's
# contracts in pyproject.toml, docs/architecture.md).
lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The manual's generated parts (docs/cli.md, the tables of docs/events.md), rendered from the
# code; tests/test_docs.py fails when the committed ones differ.
docs: $(INSTALLED)
	$(BIN)/python -m docs.generate

# The spec kinds' JSON Schemas, from their models (`coord schema`), which editors read through
# the examples' `# yaml-language-server: $schema=...` line; tests/test_specs_cli.py fails when a
# committed schema is not what `coord schema` prints, so run this after changing a spec model.
SPEC_KINDS := saga chain aggregator plan vote agents

schemas: $(INSTALLED)
	for kind in $(SPEC_KINDS); do $(BIN)/coord schema $$kind > schemas/$$kind.json || exit 1; done

# The heavier property-based fuzz runs (300 random examples per workflow; a few minutes).
fuzz: $(INSTALLED)
	$(BIN)/pytest tests/test_fuzz.py -m fuzz_heavy -q

# What `make test` leaves out, a few minutes on two cores each: hundreds of sagas at once, some
# failing by their own input, one agent down for a while; a dev server killed or away a minute
# under sagas and chains in flight; a chain taking a flood of 5,000 events while it is queried.
soak: $(INSTALLED)
	$(BIN)/pytest -m soak -s -q

# Record more histories for the replay tests: those of the runs these tests close are added;
# the ones recorded before stay, since they are what runs started by older code look like.
histories: $(INSTALLED)
	COORD_RECORD_HISTORIES=1 $(BIN)/pytest tests/test_saga.py tests/test_chain.py tests/test_aggregator.py -q

# One table: every pattern against its hand-written temporalio baseline, from one run on one
# server (bench/table.py; `make bench BENCH_ARGS=--quick` for small runs on a shared machine).
# The benches' workers serve the seed's demo agents, as `coord worker --demo-agents` does; each
# bench also runs alone (`python -m bench.saga_bench --help`).
bench: export COORD_DEMO_AGENTS = 1
bench: $(INSTALLED) compile
	$(BIN)/python -m bench.table $(BENCH_ARGS)

# The bench's optional peer comparison (docs/bench.md): the Restate SDK and hypercorn into the
# venv (the `bench-restate` extra), restate-server from npm into bench/.restate/ (ignored by
# git; its install scripts are not run). `make bench` then runs the saga on Restate too.
RESTATE_SERVER_VERSION := 1.7.12
bench-restate-setup: $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[bench-restate]'
	npm install --prefix bench/.restate --no-fund --no-audit --ignore-scripts \
		@restatedev/restate-server@$(RESTATE_SERVER_VERSION)

clean:
	rm -rf $(VENV) .temporal *.egg-info
