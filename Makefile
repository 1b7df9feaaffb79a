# The two commands a newcomer needs: `make run` and `make test`. Everything else supports them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/jetstream-operator
STAMP := $(VENV)/.installed-stamp
DEV_DIR ?= .dev

.PHONY: help venv tools run down status test unit integration lint crds chaos bench

help:
	@echo "make run    start a local control plane + NATS, apply examples/, run the operator"
	@echo "make test   lint, unit and integration tests against real kube-apiserver and nats-server"
	@echo "make down   stop the local environment started by make run"
	@echo "make crds   regenerate crds/ from the models"
	@echo "make chaos  the fault suite at full size"
	@echo "make bench  the benchmarks behind docs/benchmarks.md"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

venv: $(STAMP)

# kube-apiserver, etcd, kubectl and helm, built once from their Go modules into ~/.cache.
tools: venv
	$(PY) -m jetstream_operator.devenv.gobuild

run: tools
	@eval "$$($(CLI) dev up --state-dir $(DEV_DIR))" && \
	  kubectl_bin="$$($(PY) -m jetstream_operator.devenv.gobuild --path kubectl)" && \
	  "$$kubectl_bin" apply -f examples/ && \
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

test: lint tools
	$(VENV)/bin/pytest tests

unit: venv
	$(VENV)/bin/pytest tests/unit

integration: tools
	$(VENV)/bin/pytest tests/integration

# The fault suite at full size (make test runs it small).
chaos: tools
	JETSTREAM_OPERATOR_FAULT_SCALE=5 $(VENV)/bin/pytest tests/integration/test_faults.py

# Benchmarks (minutes, not part of make test); figures go into docs/benchmarks.md.
bench: tools
	$(PY) bench/operator_bench.py --sizes 100 1000 5000 --idle-size 1000
	$(PY) bench/spark_bench.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The chart renders a byte-identical copy of crds/ (tests/delivery fails when they differ).
crds: venv
	$(CLI) crds --write crds
	mkdir -p charts/jetstream-operator/files/crds
	rm -f charts/jetstream-operator/files/crds/*.yaml
	cp crds/*.yaml charts/jetstream-operator/files/crds/
