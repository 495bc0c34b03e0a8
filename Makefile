# Every target sets up what it needs and is safe to run again.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
CLI    := $(VENV)/bin/pipelines
DEV    := $(VENV)/bin/pipelines-dev
STAMP  := $(VENV)/.installed
JOB    ?= enrich
RECORDS ?= 2000
PYTEST_ARGS ?=
# The full suite as two workers: the modules tests/conftest.py keeps BESIDE_THE_REST on one,
# the rest on the other (their waits overlap); output captured per test, shown on failure.
# TEST_WORKERS= runs it in one process, as before.
TEST_WORKERS ?= -n 2 --dist loadgroup --capture=fd

.DEFAULT_GOAL := help
.PHONY: help venv lock jars schemas kafka-up kafka-down kafka-status cluster-up cluster-down cluster-status \
        enrichment-up enrichment-down prometheus prometheus-up prometheus-down prometheus-screenshot demo run beam-setup beam-run images topology-up topology-down \
        check test test-unit test-integration bench bench-inner-loop bench-quick bench-latency bench-soak wrk profile \
        bench-operators chaos chaos-smoke mutation lint hooks format clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-18s %s\n", $$1, $$2}'

# The venv is what requirements.lock says, every file checked against its hash; the
# project itself is installed on top, its dependencies already there (--no-deps).
$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --require-hashes -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP) ## create the virtualenv from requirements.lock (hashes required) and install the project (python 3.11)

# uv resolves for every platform at once (--universal: Linux, macOS, Windows markers),
# keeping the versions the lock already has unless UPGRADE=1.
UV_VERSION := 0.13.9
lock: ## refresh requirements.lock from pyproject.toml (runtime, test, bench; with hashes); UPGRADE=1 takes the newest versions
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(VENV)/bin/uv pip compile pyproject.toml --extra test --extra bench --universal \
	    --python-version 3.11 --generate-hashes --custom-compile-command "make lock" \
	    $(if $(UPGRADE),--upgrade) --quiet -o requirements.lock

jars: venv ## fetch pinned jars with mvn, check sha256, build jars/src
	$(CLI) jars

kafka-up: venv ## start the local single-node Kafka broker (KRaft, from Maven jars)
	$(DEV) kafka up

kafka-down: venv ## stop the local broker
	$(DEV) kafka down

kafka-status: venv
	$(DEV) kafka status

cluster-up: venv jars ## start the local standalone Flink cluster (from the PyFlink wheel)
	$(DEV) cluster up

cluster-down: venv ## stop the local standalone Flink cluster
	$(DEV) cluster down

cluster-status: venv
	$(DEV) cluster status

enrichment-up: venv ## start the demo enrichment HTTP service
	$(DEV) enrichment up

enrichment-down: venv
	$(DEV) enrichment down

prometheus: venv ## install Debian's prometheus package (prometheus, promtool) where missing
	$(DEV) prometheus install

prometheus-up: prometheus ## a local Prometheus on 127.0.0.1:9090 scraping local runs, with deploy/prometheus's alert rules
	$(DEV) prometheus up

prometheus-down: venv
	$(DEV) prometheus down

prometheus-screenshot: venv jars kafka-up prometheus ## docs/images/prometheus-enrich.png: an enrich run with an outage, photographed in Prometheus by headless Chromium (~5 min)
	@command -v chromium >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
	$(PY) -m bench.screenshot

demo: venv kafka-up ## create the job's topics and produce $(RECORDS) demo records
	$(DEV) demo $(JOB) --records $(RECORDS)

run: venv jars kafka-up enrichment-up demo ## set everything up and run the main job on demo data (Ctrl-C stops)
	$(CLI) run $(JOB)

beam-setup: venv ## Beam's Java side (mvn, sha256-checked) and the Prism runner (go build), once
	$(CLI) beam setup

beam-run: venv beam-setup kafka-up enrichment-up demo ## the enrich job as a Beam pipeline on Prism, streaming (Ctrl-C stops)
	$(CLI) beam run enrich

schemas: venv ## fetch the operator's CRD jar (jars/schemas.txt, sha256-checked) that the unit tests validate deploy/kubernetes with
	$(DEV) schemas

images: venv ## build the base, Kafka, deploy and topology images where a Docker engine answers (else say why)
	$(DEV) docker build --deploy --topology --if-available

topology-up: venv jars images ## the production-shaped cluster in containers (docs/operations.md)
	$(DEV) topology up

topology-down: venv ## remove every container and the network of the topology
	$(DEV) topology down

check: lint test-unit ## what a fork runs on every push: lint, types, unit tests and every job's pipelines.testing tests (no broker, no Docker, no cluster; < 5 min)

test: venv jars schemas beam-setup images prometheus ## set everything up and run the whole test suite (before a release)
	$(PY) -m pytest $(TEST_WORKERS) $(PYTEST_ARGS)

test-unit: venv jars schemas prometheus ## unit tests only (no broker, no cluster); the jars: the unit tests start jobs in a mini-cluster
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

test-integration: venv jars beam-setup images prometheus ## integration tests only
	$(PY) -m pytest $(TEST_WORKERS) -m "integration or cluster" $(PYTEST_ARGS)

bench: venv jars kafka-up wrk ## the jobs against Quix Streams and Bytewax with each case's limit and CPU per record, then latency, a 10-minute soak and the profiles (JVM and Python): tables, JSON, PNGs, flame graphs in bench/results
	$(PY) -m bench.compare
	$(PY) -m bench.latency
	$(PY) -m bench.soak
	$(PY) -m bench.profile --case enrich-50ms
	$(PY) -m bench.profile --case copy-json
	$(PY) -m bench.profile --case copy-bytes --records 5000000 --window 5
	$(PY) -m bench.startup
	$(PY) -m bench.inner_loop

bench-soak: venv jars kafka-up ## enrich held at 50% of make bench's rate for 10 minutes: memory, checkpoint duration, backlog over time
	$(PY) -m bench.soak $(SOAK_ARGS)

bench-latency: venv jars kafka-up ## produce-to-visible latency at 50%/90% of make bench's rates, checkpoint 1/5/10 s, with Quix
	$(PY) -m bench.latency $(LATENCY_ARGS)

wrk: ## Debian's wrk, the load generator that measures the enrichment service's maximum (skipped with a note if it cannot be installed)
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && export DEBIAN_FRONTEND=noninteractive && \
	  { apt-get install -y -q --no-install-recommends wrk >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends wrk >/dev/null 2>&1; }; }; } || \
	  echo "wrk is not installed (sudo apt-get install wrk): make bench will not measure the service's maximum"

bench-quick: venv jars kafka-up ## a few minutes of `make bench`: fewer records and cases
	$(PY) -m bench.compare --quick

profile: venv jars kafka-up ## where enrich-50ms's time goes: CPU per process and JVM thread, JFR's hot frames, a py-spy flame graph (bench/results/profile-*)
	$(PY) -m bench.profile $(PROFILE_ARGS)

chaos: venv jars images ## every fault x 3 trials x 50,000 records on the topology: bench/results/chaos.*, table in docs/exactly-once.md
	$(PY) -m bench.chaos

chaos-smoke: venv jars images ## each fault once, passthrough, 3,000 records (what the tests run)
	$(PY) -m bench.chaos --smoke

bench-inner-loop: venv jars ## a job's pipelines.testing test, the first of a session and each after it: shared mini-cluster vs one per run (bench/results/inner-loop.*)
	$(PY) -m bench.inner_loop

bench-operators: venv jars kafka-up ## the enrichment operators (sync, async, batched) side by side
	$(PY) -m bench.operators

mutation: venv ## mutation testing of the pure modules (mutmut, [tool.mutmut]): score in mutants/
	$(PY) -m pip install -q -e '.[mutation]'
	$(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut export-cicd-stats >/dev/null
	@$(PY) -c 'import json; s = json.load(open("mutants/mutmut-cicd-stats.json")); \
	  k, t, sv, nt = s["killed"] + s["timeout"], s["total"] - s["skipped"], s["survived"], s["no_tests"]; \
	  print(f"mutation score {k}/{t} = {100 * k / max(t, 1):.1f}% (survived {sv}, not reached by a test {nt})")'

lint: venv ## ruff (pyflakes checks, import order, formatting: `make format` fixes the last two), mypy over pipelines/, pipelines_dev/ and bench/, deptry (every imported package declared), lint-imports (the layers of docs/layout.md), no function in pipelines/ over 80 lines
	$(PY) -m ruff check pipelines pipelines_dev tests bench
	$(PY) -m ruff format --check pipelines pipelines_dev tests bench
	$(PY) -m mypy
	$(VENV)/bin/deptry .
	$(VENV)/bin/lint-imports
	$(PY) -m pipelines_dev.function_length pipelines

hooks: ## check commit messages as they are written (.githooks: a subject of at most 72 characters, a body)
	git config core.hooksPath .githooks

format: venv ## sort imports and format the code (ruff)
	$(PY) -m ruff check --select I --fix pipelines pipelines_dev tests bench
	$(PY) -m ruff format pipelines pipelines_dev tests bench

clean: ## stop local services and remove local state (.local, jars/lib)
	-$(DEV) docker down  # first: no process group holds a container (.ci/run bounds this target)
	-$(DEV) cluster down
	-PIPELINES_FLINK_DIR=.local/flink-second $(DEV) cluster down
	-$(DEV) enrichment down
	-$(DEV) prometheus down
	-$(DEV) kafka down
	rm -rf .local jars/lib jars/build
