# The two commands a newcomer needs: `make run` and `make test`. Everything else supports them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/jetstream-operator
STAMP := $(VENV)/.installed-stamp
DEV_DIR ?= .dev

.PHONY: help venv tools run down status test unit integration lint crds

help:
	@echo "make run    start a local control plane + NATS, apply examples/, run the operator"
	@echo "make test   lint, unit and integration tests against real kube-apiserver and nats-server"
	@echo "make down   stop the local environment started by make run"
	@echo "make crds   regenerate crds/ from the models"

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

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

crds: venv
	$(CLI) crds --write crds
