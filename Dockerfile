# fairgpu image: the API by default; the same image runs a worker (`python worker.py`), the
# reclaim worker with embedded Beat, and Flower (see docker-compose.yml and docs/operations.md).
#
#   docker build -t fairgpu:cpu .                          # small: no torch, jobs sleep
#   docker build -t fairgpu:gpu --build-arg EXTRAS=torch .  # GPU workers: torch with CUDA
#
# EXTRAS is a space-separated list of the project's optional extras (pyproject.toml); each one
# becomes `--extra NAME` for both syncs, so the dependency layer is cached per set of extras.

ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: resolve nothing, install exactly what uv.lock says ------------------------------
FROM ${PYTHON_IMAGE} AS builder

ARG UV_VERSION=0.13.9
ARG EXTRAS=""

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

# --- runtime: the interpreter, the venv, the two entry points and the demo accounts ----------
FROM ${PYTHON_IMAGE} AS runtime

RUN groupadd --system --gid 10001 fairgpu \
    && useradd --system --uid 10001 --gid fairgpu --create-home --home-dir /home/fairgpu fairgpu

ENV PATH="/app/.venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOST=0.0.0.0 \
    PORT=8000 \
    USERS_FILE=/app/fixtures/users.json

WORKDIR /app

# Owned by root and read-only to the service user: the process cannot rewrite its own code.
COPY --from=builder /app/.venv /app/.venv
COPY main.py worker.py ./
# The demo accounts, baked in as a default; docker-compose.yml mounts the real file over it.
COPY fixtures/users.json ./fixtures/users.json

USER fairgpu:fairgpu

EXPOSE 8000
CMD ["python", "main.py"]
