# kqp container image: `kqp run` with its config mounted as a file at /etc/kqp/kqp.yaml.
#
#   docker build -t kqp:0.1.0 .
#   docker run -v "$PWD/deploy/compose/kqp:/etc/kqp:ro" -p 19092:19092 -p 9404:9404 kqp:0.1.0
#
# Two stages: the first builds a virtualenv with kqp and its dependencies (wheels only: uvloop,
# PyYAML, hiredis and prometheus-client ship manylinux wheels, kafka-python and redis are pure Python), the second
# copies only that virtualenv onto the same slim base, so no pip, build tool or cache reaches the
# final image. Mount the config's directory rather than the file itself when it will be edited
# live: kqp polls the path, and a directory mount follows a ConfigMap's or an editor's file swap.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ONLY_BINARY=uvloop,PyYAML,hiredis
# `pip install .` compiles the request path with mypyc (README "Sizing"), so the C compiler is
# installed here, in the build stage only. `--build-arg KQP_COMPILE=0` installs the Python modules
# alone, with no compiler (setup.py reads KQP_COMPILE from the environment, where ARG puts it).
ARG KQP_COMPILE=1
RUN if [ "$KQP_COMPILE" != 0 ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends gcc=4:12.2.* libc6-dev=2.36-* \
        && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
RUN python -m venv /opt/kqp
COPY pyproject.toml setup.py README.md ./
COPY proxy/ proxy/
COPY protocol/ protocol/
COPY quotas/ quotas/
COPY config/ config/
# A regular (non-editable) install: the virtualenv must not point back into /src. pip builds in an
# isolated environment of its own (setuptools and mypy, the build requirements) that stays in this
# stage. A compiler that was installed yet left the Python modules is a failed build, not a slow image.
RUN /opt/kqp/bin/pip install . \
    && /opt/kqp/bin/kqp --help > /dev/null \
    && /opt/kqp/bin/kqp compile --check \
    && if [ "$KQP_COMPILE" != 0 ]; then \
        /opt/kqp/bin/python -c "from kqp.proxy.tools.hot_path import describe; assert describe().request_path == 'compiled'"; \
    fi

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kqp" \
      org.opencontainers.image.description="A quota-enforcing Kafka proxy (KIP-13, KIP-124, KIP-219, KIP-599)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 kqp \
    && useradd --system --uid 10001 --gid kqp --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kqp \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/kqp
# /var/lib/kqp: admin.state_file's usual home; a volume mounted there starts owned by kqp.
COPY --from=build /opt/kqp /opt/kqp
ENV PATH=/opt/kqp/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    KQP_HEALTH_URL=http://127.0.0.1:9404/healthz
USER 10001:10001
# 19092: bootstrap listener; 19100 + node id: one listener per upstream broker; 9404: metrics.
EXPOSE 19092 9404
# No curl in a slim image: the interpreter that runs kqp asks its /healthz (metrics.listen must
# be set; override KQP_HEALTH_URL if it is not 127.0.0.1:9404 inside the container).
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['KQP_HEALTH_URL'], timeout=2)"]
ENTRYPOINT ["kqp", "run", "--config", "/etc/kqp/kqp.yaml"]
