#!/usr/bin/env bash
# Start the grid's own processes on loopback: the scheduler (HTTP API), two
# Celery workers with distinct node names, and Flower (basic auth). Each PID is
# kept in $SG_RUN so that down.sh stops exactly what was started.
source "$(dirname "$0")/lib.sh"
export SANDGRID_TENANTS_FILE="${SANDGRID_TENANTS_FILE:-$SG_STATE/tenants.json}"
API_PORT="${SANDGRID_API_PORT:-8700}"
FLOWER_PORT="${SANDGRID_FLOWER_PORT:-5555}"
# Every listener binds loopback unless told otherwise (23.3).
API_HOST="${SANDGRID_API_HOST:-127.0.0.1}"
FLOWER_ADDR="${SANDGRID_FLOWER_ADDR:-127.0.0.1}"
WORKERS="${SANDGRID_WORKERS:-w1 w2}"
# Sandbox types the workers serve: every type the README names, python-gvisor
# (runsc, registered by docker.sh) included when runsc-check.sh proves it runs
# here; the benchmarks' types run batches (docs/batch.md).
if [ -z "${SANDGRID_WORKER_TYPES:-}" ]; then
  if "$(dirname "$0")/runsc-check.sh"; then
    SANDGRID_WORKER_TYPES="python,python-gvisor,node,devbox,bfcl,appworld"
  else
    log "grid: runsc does not run here: the workers do not serve python-gvisor"
    SANDGRID_WORKER_TYPES="python,node,devbox,bfcl,appworld"
  fi
fi
WORKER_TYPES="$SANDGRID_WORKER_TYPES"
flower_pw="$SG_STATE/flower-password"
[ -s "$flower_pw" ] || (umask 077; "$SG_PY" -c 'import secrets; print(secrets.token_urlsafe(18))' >"$flower_pw")

# each process with its own Redis role (23.19: redis_url in lib.sh)
SANDGRID_REDIS_URL="$(redis_url api)" start_bg scheduler sandgrid serve --host "$API_HOST" --port "$API_PORT"
# the API seeds the types file into the registry as it starts: the workers come after,
# so that they start on this checkout's catalog, not on the registry's older copy
wait_for "scheduler" 60 curl -sf "http://127.0.0.1:$API_PORT/v1/health"
for w in $WORKERS; do
  SANDGRID_REDIS_URL="$(redis_url worker)" \
    start_bg "worker-$w" sandgrid worker --types "$WORKER_TYPES" --concurrency 4 --node "$w"
done
# scheduler.flower: Flower with /metrics behind the same basic auth (Flower 2.2 leaves
# it open), its password read from the file, never on a command line (23.6)
SANDGRID_FLOWER_PASSWORD_FILE="$flower_pw" SANDGRID_REDIS_URL="$(redis_url flower)" start_bg flower "$SG_PY" -m scheduler.flower \
  -A sandgrid.wire.celery_app:app flower --address="$FLOWER_ADDR" --port="$FLOWER_PORT" --persistent=False
# the main job's type served: each worker's heartbeat names python (GET /v1/nodes)
serves_python() {
  "$SG_PY" - "$API_PORT" "$1" <<'PY'
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/nodes", timeout=5) as r:
    nodes = {n["name"]: n["types"] for n in json.load(r)["nodes"]}
sys.exit(0 if "python" in nodes.get(sys.argv[2], []) else 1)
PY
}
for w in $WORKERS; do wait_for "worker $w" 120 serves_python "$w"; done
wait_for "flower" 60 curl_auth "admin:$(cat "$flower_pw")" "http://127.0.0.1:$FLOWER_PORT/healthcheck"
log "grid: scheduler http://127.0.0.1:$API_PORT (docs at /docs), workers: $WORKERS"
log "grid: flower http://127.0.0.1:$FLOWER_PORT (user admin, password in $flower_pw)"
