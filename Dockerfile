# fairgpu image: the API by default; the same image runs a worker (`python worker.py`), the
# reclaim worker with embedded Beat, and Flower (see docker-compose.yml and docs/operations.md).
#
#   docker build -t fairgpu:cpu .                          # small: no torch, jobs sleep
#   docker build -t fairgpu:gpu --build-arg EXTRAS=torch --build-arg SCRIPT_BASE=torch .
#                                                          # GPU workers: torch with CUDA, and
#                                                          #   a script jobs' base with torch
#
# EXTRAS is a space-separated list of the project's optional extras (pyproject.toml); each one
# becomes `--extra NAME` for both syncs, so the dependency layer is cached per set of extras.
#
# Script jobs (docs/scripts.md): the runtime has uv (to build a project's environment) and
# bubblewrap with util-linux's setpriv and prlimit (its sandbox). SCRIPT_BASE names packages of
# the lock for the scripts' base environment, /opt/script-base: a virtual environment of its own
# (never the service's /app/.venv), installed at the versions uv.lock pins for them and their
# dependencies. Empty: the folder is an empty environment, and the workers that do not set
# SCRIPT_BASE_ENV give scripts a bare interpreter instead.

ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: resolve nothing, install exactly what uv.lock says ------------------------------
FROM ${PYTHON_IMAGE} AS builder

ARG UV_VERSION=0.13.9
ARG EXTRAS=""
ARG SCRIPT_BASE=""

# uv comes from the default package index by name, like any other Python package.
RUN pip install --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION}"

ENV UV_PROJECT_ENVIRONMENT=/app/.venv \
    UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1

WORKDIR /app

# Dependencies first: this layer is rebuilt only when the lock file (or EXTRAS) changes.
COPY pyproject.toml uv.lock ./
RUN extras="$(for name in ${EXTRAS}; do printf ' --extra %s' "${name}"; done)" \
    && uv sync --frozen --no-dev --no-install-project ${extras}

# Then the project itself, installed into the venv as a regular (non-editable) package, so the
# runtime stage needs no source tree for `app`.
COPY README.md ./
COPY app ./app
RUN extras="$(for name in ${EXTRAS}; do printf ' --extra %s' "${name}"; done)" \
    && uv sync --frozen --no-dev --no-editable ${extras}

# The script jobs' base environment, apart from the service's: the named packages, every
# version constrained to what uv.lock says (the lock's export is a constraints file).
RUN extras="$(for name in ${EXTRAS}; do printf ' --extra %s' "${name}"; done)" \
    && uv venv /opt/script-base --python /usr/local/bin/python3 \
    && if [ -n "${SCRIPT_BASE}" ]; then \
         uv export --frozen --no-dev --no-hashes --no-emit-project ${extras} > /tmp/locked.txt \
         && uv pip install --python /opt/script-base --constraint /tmp/locked.txt ${SCRIPT_BASE}; \
       fi

# --- runtime: the interpreter, the venv, the two entry points and the demo accounts ----------
FROM ${PYTHON_IMAGE} AS runtime

RUN groupadd --system --gid 10001 fairgpu \
    && useradd --system --uid 10001 --gid fairgpu --create-home --home-dir /home/fairgpu fairgpu

# Script jobs' sandbox: bubblewrap, and util-linux's setpriv and prlimit (Debian's, not setuid:
# bubblewrap runs on unprivileged user namespaces, which the worker's container must allow; see
# docs/operations.md, "Script jobs"); passt's pasta and iproute2's ip make the filtered network
# of builds and networked scripts (it needs /dev/net/tun: docs/security.md). The environment
# cache's and the artifacts' folders belong to the service user, so a named volume mounted there
# starts writable to it.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends bubblewrap util-linux passt iproute2 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/cache/fairgpu/envs /var/lib/fairgpu/artifacts \
    && chown fairgpu:fairgpu /var/cache/fairgpu/envs /var/lib/fairgpu/artifacts

ENV PATH="/app/.venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOST=0.0.0.0 \
    PORT=8000 \
    USERS_FILE=/app/fixtures/users.json \
    SCRIPT_ENV_CACHE_DIR=/var/cache/fairgpu/envs \
    UV_PYTHON_DOWNLOADS=never

WORKDIR /app

# Owned by root and read-only to the service user: the process cannot rewrite its own code.
COPY --from=builder /app/.venv /app/.venv
# uv builds the script jobs' environments; the scripts' base lives outside the service's folder.
COPY --from=builder /usr/local/bin/uv /usr/local/bin/uv
COPY --from=builder /opt/script-base /opt/script-base
COPY main.py worker.py ./
# The demo accounts, baked in as a default; docker-compose.yml mounts the real file over it.
COPY fixtures/users.json ./fixtures/users.json

USER fairgpu:fairgpu

EXPOSE 8000
CMD ["python", "main.py"]
