# The jetstream-operator image: `docker build -t jetstream-operator:0.1.0 .`
#
# Two stages: `build` installs the pinned dependencies and the operator into a virtualenv;
# the final stage copies only that virtualenv onto a fresh slim Python, without pip,
# setuptools, wheel or any compiler, and runs as a non-root numeric user.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv
WORKDIR /src

# Every package of the image, pinned with hashes in image-requirements.txt, which pip-compile
# maintains (`make image-lock`): the runtime closure of pyproject.toml's dependencies plus the
# build backend. Every package has a wheel for CPython 3.11, so no compiler is needed.
COPY image-requirements.txt ./
RUN pip install --no-deps --require-hashes --requirement image-requirements.txt \
    && pip check

# The operator itself, built with the pinned build tools and without fetching anything else;
# the build tools then leave the virtualenv.
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-deps --no-build-isolation . \
    && pip uninstall --yes pip setuptools wheel packaging \
    && jetstream-operator --help > /dev/null


FROM ${PYTHON_IMAGE}

# pyproject.toml's version: the build passes it (jetstream_devtools.containers, make release).
ARG VERSION=unknown
LABEL org.opencontainers.image.title="jetstream-operator" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.description="Kubernetes operator for NATS JetStream streams and consumers" \
      org.opencontainers.image.licenses="Apache-2.0"

# A named user, so getpass.getuser() (kopf's peering identity) resolves; the numeric id is what
# the chart's securityContext expects (runAsUser/runAsGroup 10001). Not `operator`: Debian has
# that group already (GID 37). The base's own pip, if it has one, goes too.
RUN groupadd --system --gid 10001 jetstream-operator \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin jetstream-operator \
    && if python -m pip --version > /dev/null 2>&1; then \
        python -m pip uninstall --yes pip setuptools wheel; fi

COPY --from=build /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:10001
WORKDIR /tmp
EXPOSE 8080

ENTRYPOINT ["jetstream-operator", "run"]
CMD ["--liveness=http://0.0.0.0:8080/healthz"]
