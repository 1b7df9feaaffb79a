# The two commands a newcomer needs: `make run` and `make test`. Everything else supports them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/jetstream-operator
STAMP := $(VENV)/.installed-stamp
DEV_DIR ?= .dev

.PHONY: help venv tools run down status release test test-systems test-matrix unit integration lint crds chaos bench e2e e2e-image e2e-check image image-lock e2e-node

help:
	@echo "make run    start a local control plane + NATS, apply examples/, run the operator"
	@echo "            (AUTH=jwt: NATS in operator mode, with examples/accounts/)"
	@echo "make test   lint, unit and integration tests against real kube-apiserver and nats-server"
	@echo "make test-systems  the image on a real kubelet node, Argo CD and a Spark cluster (CI runs both)"
	@echo "make test-matrix  the smoke suite on nats-server 2.14 and Kubernetes 1.30 (docs/versioning.md; CI runs it)"
	@echo "make down   stop the local environment started by make run"
	@echo "make crds   regenerate crds/ from the models"
	@echo "make release  every artifact of this version into dist/ (NO_IMAGE=1: without the image)"
	@echo "make e2e-node  only the image and one-node cluster tests (part of make test-systems; needs root)"
	@echo "make image  build the image with a Docker this sets up (apt-get, dockerd, a debootstrap base)"
	@echo "make image-lock  re-pin image-requirements.txt (every package of the image) with pip-compile"
	@echo "make chaos  the fault suite at full size"
	@echo "make bench  the benchmarks behind docs/benchmarks.md"
	@echo "make e2e    the end-to-end suites against an existing cluster: E2E_KUBECONFIG=... E2E_NATS_URL=..."
	@echo "make e2e-image  build the image, load it into kind, run it in the cluster (needs docker/podman)"
	@echo "make test-kopf-latest  the unit tests against the newest kopf 1.x, past pyproject's pin (kopf_adaptations)"

# The operator and its dev tools (devtools/: a distribution of its own, kept out of the image).
$(STAMP): pyproject.toml devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test,spark]' -e ./devtools
	touch $(STAMP)

venv: $(STAMP)

# kube-apiserver, etcd, kubectl and helm, built once from their Go modules into ~/.cache.
tools: venv
	$(PY) -m jetstream_devtools.gobuild

# AUTH=jwt: NATS in operator mode (the default connection a user of its default account), and
# examples/accounts/ (a NatsAccount, a team's stream and NatsUser) applied too, with the dev
# server's URL (docs/accounts.md).
AUTH ?= none
run: tools
	@eval "$$($(CLI) dev up --state-dir $(DEV_DIR) --auth $(AUTH))" && \
	  kubectl_bin="$$($(PY) -m jetstream_devtools.gobuild --path kubectl)" && \
	  "$$kubectl_bin" apply -f examples/ && \
	  if [ "$(AUTH)" = jwt ]; then for manifest in examples/accounts/*.yaml; do \
	    sed "s|nats://127.0.0.1:4222|$$NATS_URL|" "$$manifest" | "$$kubectl_bin" apply -f - || exit 1; \
	  done; fi && \
	  echo && echo "Local environment is up. In another shell:" && \
	  echo "  export KUBECONFIG=$$KUBECONFIG NATS_URL=$$NATS_URL" && \
	  echo "  export PATH=$$(dirname $$kubectl_bin):\$$PATH" && \
	  echo "  kubectl get streams" && \
	  echo "Stop with Ctrl-C, then 'make down'." && echo && \
	  exec $(CLI) run

down: venv
	$(CLI) dev down --state-dir $(DEV_DIR)

status: venv
	$(CLI) dev status --state-dir $(DEV_DIR)

# The suites against whole real systems, each minutes long: the image built and run on a
# kubelet node the tests start, Argo CD syncing the chart, a standalone Spark cluster. `make test`
# runs everything else; .ci/run runs both. Each prints its slowest tests.
SYSTEM_TESTS := tests/delivery/test_dockerfile.py tests/e2e_image tests/integration/test_cli_dev.py \
  tests/argocd tests/spark/test_cluster.py
SLOWEST := --durations=20
# make test runs test files on this many pytest-xdist workers, each with its own kube-apiserver,
# nats-servers and operator (session fixtures are per worker): the suite mostly waits on them.
TEST_WORKERS ?= 2

test: lint tools
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(SLOWEST) tests \
	  $(addprefix --ignore=,$(SYSTEM_TESTS))

test-systems: tools
	$(VENV)/bin/pytest $(SLOWEST) -rs $(SYSTEM_TESTS)

unit: venv
	$(VENV)/bin/pytest tests/unit

# The unit tests in a venv of their own with the newest kopf 1.x, past pyproject's pin: where
# a kopf adaptation no longer applies (kopf_adaptations.py), test_kopf_adaptations fails by name.
# (Under build/, which git, and so ruff, ignores.)
KOPF_LATEST_VENV ?= build/venv-kopf-latest
.PHONY: test-kopf-latest
test-kopf-latest:
	$(PYTHON) -m venv $(KOPF_LATEST_VENV)
	$(KOPF_LATEST_VENV)/bin/pip install --quiet --upgrade pip
	$(KOPF_LATEST_VENV)/bin/pip install --quiet -e '.[test,spark]' -e ./devtools
	$(KOPF_LATEST_VENV)/bin/pip install --quiet --upgrade 'kopf<2'
	$(KOPF_LATEST_VENV)/bin/pip show kopf | grep '^Version'
	$(KOPF_LATEST_VENV)/bin/pytest tests/unit -p no:cacheprovider

# The compatibility matrix (docs/versioning.md); make test runs everything on the test extras'
# nats-server 2.12 and Kubernetes 1.34. .ci/run runs this too:
# - the smoke suite (Stream, Consumer, KeyValue and ObjectStore Ready, drift repair, deletion,
#   consumer reset through the server's reset API) on nats-server 2.14, built from its Go module;
# - the smoke suite and the admission policies (CEL in the CRDs, the tenancy and finalizer
#   policies) on the oldest Kubernetes the chart accepts, its control plane built from source.
MATRIX_SMOKE := tests/integration/test_stream_lifecycle.py tests/integration/test_consumers.py \
  tests/integration/test_buckets.py tests/integration/test_stream_drift.py \
  tests/integration/test_stream_deletion.py tests/integration/test_consumer_reset.py \
  tests/integration/test_snapshots.py
MATRIX_OLDEST_KUBERNETES := $(MATRIX_SMOKE) tests/integration/test_devenv.py \
  tests/integration/test_admission_policies.py tests/integration/test_tenant_admission.py \
  tests/integration/test_admission_finalizer.py
test-matrix: tools
	@server=$$($(PY) -m jetstream_devtools.gobuild --path nats-server) && \
	  $$server --version | grep -q 'v2\.14\.' && echo "smoke suite on $$($$server --version)" && \
	  JETSTREAM_OPERATOR_NATS_SERVER=$$server $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile \
	  $(MATRIX_SMOKE)
	@oldest=$$($(PY) -c 'from jetstream_devtools.paths import OLDEST_KUBERNETES_VERSION as v; print(v)') && \
	  $(PY) -m jetstream_devtools.gobuild kube-apiserver@$$oldest kube-controller-manager@$$oldest && \
	  echo "smoke suite and admission on Kubernetes $$oldest" && \
	  JETSTREAM_OPERATOR_KUBERNETES_VERSION=$$oldest $(VENV)/bin/pytest -n $(TEST_WORKERS) \
	  --dist loadfile $(MATRIX_OLDEST_KUBERNETES)

integration: tools
	$(VENV)/bin/pytest tests/integration

# The fault suite at full size (make test runs it small).
# The fault suite and the property test of generated specs at full size (make test runs both
# small).
chaos: tools
	JETSTREAM_OPERATOR_FAULT_SCALE=5 $(VENV)/bin/pytest tests/integration/test_faults.py
	JETSTREAM_OPERATOR_FUZZ_SCALE=6 $(VENV)/bin/pytest tests/integration/test_fuzzed_specs.py

# Benchmarks (minutes, not part of make test); figures go into docs/benchmarks.md.
# NACK runs beside ours when NACK_BIN and NACK_CRDS name its binary and CRDs (docs/benchmarks.md
# says how to build it from its source).
bench: tools
	$(PY) bench/operator_bench.py --sizes 100 1000 5000 --idle-size 1000 --busy 1000 --split 1000 \
		--identities workload --rounds 3
	$(PY) bench/spark_bench.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy bench
	$(VENV)/bin/mypy tests

# The image and one-node cluster tests alone (part of make test): the image built from this
# checkout, the chart installed with it on a kubelet + containerd node the tests start.
e2e-node: tools
	$(VENV)/bin/pytest -rs tests/delivery/test_dockerfile.py tests/e2e_image \
	  tests/integration/test_cli_dev.py

# The image, built as a user builds it, on a machine with no registry: Debian's docker.io is
# installed and started, and the base image the Dockerfile names is made with debootstrap.
IMAGE ?= jetstream-operator:dev
# Every artifact of pyproject.toml's version into dist/: wheels and sdists (the operator, and
# jetstream-spark, the data source alone), the packaged chart, the image (OCI layout tarball),
# SHA256SUMS. NO_IMAGE=1 leaves out the image; REGISTRY=host:port pushes the image and the chart
# to that (plain-HTTP) OCI registry too.
release: venv
	$(PY) -m jetstream_devtools.release --out dist $(if $(NO_IMAGE),--no-image) \
	  $(if $(REGISTRY),--registry $(REGISTRY))

image: venv
	$(PY) -m jetstream_devtools.containers --build $(IMAGE)

# image-requirements.txt pins every package of the image with hashes; pip-compile maintains it
# (from pyproject.toml's dependencies and build requirements), never edit it by hand.
PIP_TOOLS_VERSION := 7.6.2
PIP_TOOLS := $${JETSTREAM_OPERATOR_CACHE:-$$HOME/.cache/jetstream-operator}/pip-tools-$(PIP_TOOLS_VERSION)
image-lock:
	@test -x $(PIP_TOOLS)/bin/pip-compile || { $(PYTHON) -m venv $(PIP_TOOLS) && \
	  $(PIP_TOOLS)/bin/pip install --quiet pip-tools==$(PIP_TOOLS_VERSION); }
	$(PIP_TOOLS)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	  --all-build-deps --no-emit-index-url --no-emit-find-links \
	  --output-file image-requirements.txt pyproject.toml

# The chart renders a byte-identical copy of crds/ (tests/delivery fails when they differ).
crds: venv
	$(CLI) crds --write crds
	mkdir -p charts/jetstream-operator/files/crds
	rm -f charts/jetstream-operator/files/crds/*.yaml
	cp crds/*.yaml charts/jetstream-operator/files/crds/

# The end-to-end suites against an existing cluster (a kind cluster with NATS, say) instead of the
# servers the tests start themselves. The operator runs from this checkout on this machine.
E2E_KUBECONFIG ?=
E2E_NATS_URL ?=
E2E_IN_CLUSTER_NATS_URL ?= nats://nats.nats.svc:4222
E2E_IMAGE ?= jetstream-operator:e2e
KIND_CLUSTER ?= kind
export JETSTREAM_OPERATOR_E2E_KUBECONFIG = $(E2E_KUBECONFIG)
export JETSTREAM_OPERATOR_E2E_NATS_URL = $(E2E_NATS_URL)

e2e-check:
	@test -n "$(E2E_KUBECONFIG)" -a -n "$(E2E_NATS_URL)" || { \
	  echo "set E2E_KUBECONFIG (a kubeconfig whose current context is the cluster) and"; \
	  echo "E2E_NATS_URL (NATS as reachable from this machine, e.g. after kubectl port-forward)"; \
	  exit 2; }

e2e: venv e2e-check
	$(VENV)/bin/pytest -rs tests/integration tests/delivery

# The image-based steps: build the image, load it into the kind cluster, install the chart with
# it and watch it reconcile. Skipped, and said so, where no container engine runs.
e2e-image: venv e2e-check
	@engine=""; for candidate in docker podman; do \
	  if command -v $$candidate >/dev/null && $$candidate info >/dev/null 2>&1; then \
	    engine=$$candidate; break; fi; done; \
	if [ -z "$$engine" ]; then \
	  echo "SKIPPED: no working container engine here (docker/podman), so the image is not built"; \
	  echo "and the in-cluster steps do not run. The rest of the suite runs with 'make e2e'."; \
	  exit 0; fi; \
	set -e; $$engine build --tag $(E2E_IMAGE) . ; \
	if command -v kind >/dev/null; then kind load docker-image $(E2E_IMAGE) --name $(KIND_CLUSTER); \
	else echo "kind not found: make sure the cluster can pull $(E2E_IMAGE)"; fi; \
	JETSTREAM_OPERATOR_E2E_IMAGE=$(E2E_IMAGE) \
	JETSTREAM_OPERATOR_E2E_IN_CLUSTER_NATS_URL=$(E2E_IN_CLUSTER_NATS_URL) \
	  $(VENV)/bin/pytest -rs tests/e2e_image
