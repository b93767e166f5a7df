# rmq_ha — `make help` lists the targets. Everything installs what it needs into .venv.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.dev-stamp
NATIVE_SRC := $(shell find crates -name target -prune -o \( -name '*.rs' -o -name Cargo.toml \) -print 2>/dev/null) Cargo.toml pyproject.toml
TOOL_PKGS := $(patsubst %/pyproject.toml,%,$(wildcard jepsen/pyproject.toml spark/pyproject.toml))
NATIVE_SRC += $(wildcard jepsen/pyproject.toml spark/pyproject.toml)
FUZZ_SECONDS ?= 60
PYTEST_ARGS ?=

.PHONY: certs help dev demo test test-rust test-py test-fuzz lint fmt bench clean fuzz sim interop sysdeps wheels wheelhouse

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

$(STAMP): $(VPY) $(NATIVE_SRC)
	$(VPY) -m pip install -q "maturin>=1.5,<2"
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --extras dev
	$(VPY) -c "import rmq_ha._native"
	@# the tools above rmq_ha: the bench (jepsen/) and the checker (spark/), editable
	for d in $(TOOL_PKGS); do $(VPY) -m pip install -q -e $$d || exit 1; done
	touch $(STAMP)

dev: $(STAMP) ## create .venv, build the Rust core with maturin, install rmq_ha (idempotent)

demo: dev ## 5 local hosts, 60 s controller-mode campaign with partitions and kills, check, verdict (root; else loopback, kill+pause)
	$(VENV)/bin/rmq-ha campaign demo

test: dev sysdeps test-rust test-py test-fuzz ## run every test (Rust, Python, a short fuzz replay)

SYSDEPS := openssh-server iptables faketime vagrant prometheus
sysdeps: ## as root with apt-get: the system packages the bench and its tests use ($(SYSDEPS))
	@# flock: two checkouts running `make test` at once must not race for apt's locks
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  exec 9>/tmp/rmq-ha-sysdeps.lock; flock -w 1200 9 || exit 1; \
	  missing=""; for p in $(SYSDEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then echo "sysdeps: installing$$missing"; \
	    apt-get -o DPkg::Lock::Timeout=600 update -q && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q $$missing >/dev/null; fi; \
	else echo "sysdeps: not root or no apt-get: campaigns run on loopback processes (kill and pause only) and vagrant validate is skipped"; fi

test-rust: ## cargo test for the whole workspace
	cargo test --workspace --release -q

test-fuzz: ## 20 s of the stable fuzz replay driver: records, frames, batch bodies (`make fuzz` for longer)
	cd crates/rmq-wire/fuzz && cargo run --release -q --bin replay -- 20

test-py: dev wheelhouse ## pytest, incl. the Java/Go client interop suite against rmq_ha (exit code 5 fails); the checker's tests in a process of their own
ifeq ($(strip $(PYTEST_ARGS)),)
	RMQ_INTEROP_IMPL=rmq_ha $(VPY) -m pytest -q --ignore=tests/spark
	# tests/spark in its own pytest process: late in one long process the shared Spark session
	# hung now and then (the JVM's DAG scheduler blocked in PythonAccumulatorV2.merge). A check
	# runs no Python task any more, which removes that path (docs/PERF.md); kept apart anyway.
	$(VPY) -m pytest -q tests/spark
else
	RMQ_INTEROP_IMPL=rmq_ha $(VPY) -m pytest -q $(PYTEST_ARGS)
endif

certs: ## a test CA, server (127.0.0.1/localhost) and client certificates for TLS in .certs/ (never committed; docs/security.md)
	bash scripts/gen_test_certs.sh .certs

INTEROP_IMPL ?= both
interop: dev ## real Java + Go RocketMQ clients vs real RocketMQ 5.5.0 and rmq_ha (INTEROP_IMPL=real|rmq_ha|both)
	RMQ_INTEROP_IMPL=$(INTEROP_IMPL) $(VPY) -m pytest -q tests/interop $(PYTEST_ARGS)

lint: dev ## cargo fmt --check, clippy -D warnings, ruff, mypy, the .pyi stub against the built module
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --release -- -D warnings
	$(VENV)/bin/ruff check python tests
	$(VENV)/bin/ruff format --check python tests
	$(VENV)/bin/mypy
	$(VPY) -m rmq_ha._stubcheck
	cd crates/rmq-wire/fuzz && cargo fmt -- --check && cargo clippy --all-targets --release -- -D warnings
	$(VENV)/bin/ruff check jepsen
	$(VENV)/bin/ruff format --check jepsen
	cd jepsen && ../$(VENV)/bin/mypy
	$(VENV)/bin/ruff check spark
	$(VENV)/bin/ruff format --check spark
	cd spark && ../$(VENV)/bin/mypy

SEEDS ?= 20000
sim: dev ## run SEEDS (default 20000) deterministic Raft, broker-group and acting-master simulator seeds (make test runs 2000, 2000, 1000)
	$(VPY) -m rmq_ha.sim --seeds $(SEEDS) --jobs 2
	$(VPY) -m rmq_ha.sim --group --seeds $(SEEDS) --jobs 2
	$(VPY) -m rmq_ha.sim --acting --seeds $(SEEDS) --jobs 2

fuzz: ## fuzz the record decoder: a stable replay driver, plus cargo fuzz when nightly is installed
	scripts/fuzz.sh $(FUZZ_SECONDS)

fmt: dev ## format Rust and Python
	cargo fmt --all
	$(VENV)/bin/ruff format python tests jepsen spark
	$(VENV)/bin/ruff check --fix python tests jepsen spark

bench: dev ## storage benchmark vs a plain sequential writer (writes docs-ready JSON to stdout)
	$(VENV)/bin/rmq-ha bench store

DIST ?= dist
wheels: dev ## the three wheels into $(DIST)/: rmq-ha (stripped, manylinux_2_17 via zig), rmq-jepsen, rmq-check
	$(VPY) -m rmq_jepsen.wheels --out $(DIST)

WHEELHOUSE := $(VENV)/wheelhouse
$(WHEELHOUSE)/.stamp: $(STAMP) pyproject.toml jepsen/pyproject.toml spark/pyproject.toml
	$(VPY) -m rmq_jepsen.wheels --requirements > $(VENV)/wheelhouse.txt
	$(VPY) -m pip wheel -q -w $(WHEELHOUSE) -r $(VENV)/wheelhouse.txt
	touch $@

wheelhouse: $(WHEELHOUSE)/.stamp ## the three wheels' dependencies as wheels in .venv/wheelhouse (the wheel test installs offline)

clean: ## remove build outputs, wheels and the virtualenv
	cargo clean
	rm -rf $(VENV) target $(DIST)

# ---- the Jepsen-style bench, its benchmarks and demos (jepsen/, issues 6 and 14) -----------------
.PHONY: demo-store bench-history hosts-down

demo-store: dev ## the store demo: write/read a million messages, crash a writer mid-batch, recover
	$(VENV)/bin/rmq-ha demo store

bench-history: dev ## recorder ops/s vs raw json writes, and 5-host bring-up time (rmq-ha bench history)
	$(VENV)/bin/rmq-ha bench history --json

hosts-down: dev ## heal every fault the bench journalled, stop its processes, delete local hosts
	$(VENV)/bin/rmq-ha hosts down

.PHONY: test-real-rocketmq
test-real-rocketmq: dev ## real RocketMQ 5.5.0 controller mode (3 namesrv+controllers, 3 brokers): failover and heal, mqadmin's controller commands, a campaign; and bench acting-master on its classic acting-master topology (5-10 min; java+mvn)
	RMQ_REAL_ROCKETMQ_TEST=1 $(VPY) -m pytest -q tests/jepsen/test_real_controller_group.py tests/interop/test_mqadmin_controller_real.py tests/jepsen/test_campaign_rocketmq.py tests/jepsen/test_bench_acting_real.py $(PYTEST_ARGS)

# --- history checker (spark/, issue 7) ---
.PHONY: test-check check-demo bench-check
CHECK_DEMO_DIR ?= $(or $(TMPDIR),/tmp)/rmq-check-demo

test-check: dev ## the checker's known-answer tests only (tests/spark, ~4-5 min on 2 cores)
	$(VPY) -m pytest -q tests/spark $(PYTEST_ARGS)

check-demo: dev ## a synthetic run with 2 of every anomaly injected, checked: prints the verdict
	rm -rf $(CHECK_DEMO_DIR)
	$(VPY) -m rmq_check.synth $(CHECK_DEMO_DIR) --ops 200000 --inject 2
	$(VENV)/bin/rmq-ha check $(CHECK_DEMO_DIR); echo "exit code $$? (1 = a safety property failed, as injected)"
	@echo "report: $(CHECK_DEMO_DIR)/report.html"

CHECK_OPS ?= 20000000
bench-check: dev ## checker throughput vs a pure-Python baseline (CHECK_OPS ops, default 20M)
	$(VENV)/bin/rmq-ha bench check --ops $(CHECK_OPS)

# --- a Spark standalone cluster for the checker (issue 18) ---
.PHONY: spark-cluster spark-cluster-stop test-spark-cluster
SPARK_CLUSTER_DIR ?= $(or $(TMPDIR),/tmp)/rmq-check-spark

spark-cluster: dev ## Spark standalone master + 2 workers on loopback from the venv's PySpark; prints the spark:// URL for `rmq-ha check --master`
	$(VPY) -m rmq_check.cluster start --dir $(SPARK_CLUSTER_DIR) --workers 2

spark-cluster-stop: ## stop the cluster `make spark-cluster` started
	$(VPY) -m rmq_check.cluster stop --dir $(SPARK_CLUSTER_DIR)

test-spark-cluster: dev ## a check on a standalone cluster (its own master + 2 workers) equals local[2] (~3 min)
	RMQ_CHECK_CLUSTER_TEST=1 $(VPY) -m pytest -q tests/spark/test_check_cluster.py $(PYTEST_ARGS)
