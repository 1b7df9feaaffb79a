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

# Runtime dependencies, pinned: the closure of pyproject.toml's [project].dependencies at the
# versions the test suite runs with. tests/delivery/test_dockerfile.py checks that every
# runtime dependency is pinned here and that the pins satisfy pyproject.toml. Every package
# has a manylinux wheel for CPython 3.11, so no compiler is needed.
RUN pip install --no-deps \
        aiohappyeyeballs==2.7.1 \
        aiohttp==3.14.5 \
        aiohttp-retry==2.9.1 \
        aiosignal==1.4.0 \
        annotated-types==0.8.0 \
        attrs==26.1.0 \
        certifi==2026.10.18 \
        cffi==2.1.1 \
        charset-normalizer==3.5.2 \
        click==8.5.1 \
        cryptography==50.0.2 \
        durationpy==0.11 \
        frozenlist==1.8.0 \
        idna==3.20 \
        iso8601==2.1.0 \
        jsonpatch==1.47 \
        jsonpointer==3.12 \
        kopf==1.45.2 \
        kubernetes==37.0.2 \
        multidict==7.2.1 \
        nats-py==2.16.0 \
        oauthlib==4.0.1 \
        prometheus-client==0.26.0 \
        propcache==0.5.4 \
        pycparser==3.12 \
        pydantic==2.14.3 \
        pydantic-core==2.50.4 \
        pydantic-settings==2.16.3 \
        python-dateutil==4.0.0 \
        python-dotenv==1.2.4 \
        python-json-logger==4.2.0 \
        pyyaml==6.0.3 \
        requests==2.34.2 \
        requests-oauthlib==2.0.0 \
        typing-extensions==4.16.0 \
        typing-inspection==0.4.5 \
        tzdata==2026.6 \
        urllib3==2.8.0 \
        websocket-client==1.9.2 \
        yarl==1.25.1 \
    && pip check

# The operator itself, built with pinned build tools and without fetching anything else.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install setuptools==84.2.1 wheel==0.48.0 \
    && pip install --no-deps --no-build-isolation . \
    && pip uninstall --yes pip setuptools wheel \
    && jetstream-operator --help > /dev/null


FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="jetstream-operator" \
      org.opencontainers.image.description="Kubernetes operator for NATS JetStream streams and consumers" \
      org.opencontainers.image.licenses="Apache-2.0"

# A named user, so getpass.getuser() (kopf's peering identity) resolves; the numeric id is what
# the chart's securityContext expects (runAsUser/runAsGroup 10001).
RUN groupadd --system --gid 10001 operator \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin operator \
    && python -m pip uninstall --yes pip setuptools wheel

COPY --from=build /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:10001
WORKDIR /tmp
EXPOSE 8080

ENTRYPOINT ["jetstream-operator", "run"]
CMD ["--liveness=http://0.0.0.0:8080/healthz"]
