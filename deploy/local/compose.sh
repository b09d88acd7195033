#!/usr/bin/env bash
# The compose stack (docker-compose.yml), exercised: `compose.sh check` brings
# it up from the locally built images, runs the main job and a small batch
# against it, takes it down, and fails if anything of it is left (containers of
# the project or of its worker nodes, volumes). It runs beside the host's own
# services, on other loopback ports. Needs `make services` first (images, the
# MinIO binary, the tenants file). Installs Debian's docker-compose if missing.
#
#   compose.sh check   the whole round trip (what .ci/run calls)
#   compose.sh down    take the stack down (idempotent)
source "$(dirname "$0")/lib.sh"

export COMPOSE_PROJECT_NAME=sgcompose
export SANDGRID_REDIS_PORT=16379 SANDGRID_MINIO_PORT=19000 SANDGRID_API_PORT=18700 \
  SANDGRID_FLOWER_PORT=15555
# Flower reads its password from this file (mounted; never on a command line)
export SANDGRID_FLOWER_PASSWORD_FILE="${SANDGRID_FLOWER_PASSWORD_FILE:-$SG_STATE/flower-password}"
export PWD="$SG_ROOT"
export SANDGRID_STATE_DIR="$SG_STATE"  # the tenants file, ACL file and token mounted from it
API="http://127.0.0.1:$SANDGRID_API_PORT"
NODES=(c1 c2)

# The generated credentials (credentials.sh) reach compose as its --env-file.
compose() { (cd "$SG_ROOT" && docker-compose --env-file "$SG_SECRETS" -f docker-compose.yml "$@"); }

# left: what of the stack still exists, one line each (empty when nothing).
left() {
  docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"
  for n in "${NODES[@]}"; do docker ps -aq --filter "label=sandgrid.worker=$n"; done
  docker volume ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"
}

down() {
  compose down -v --remove-orphans --timeout 60 >/dev/null 2>&1 || true
  # sandboxes are the workers' own containers, not the project's: a worker
  # that drained removed them; anything a killed one left goes here
  for n in "${NODES[@]}"; do
    ids="$(docker ps -aq --filter "label=sandgrid.worker=$n")"
    [ -z "$ids" ] || docker rm -f $ids >/dev/null
  done
}

serving() {
  curl -sf -H "Authorization: Bearer $(cat "$SG_STATE/token")" "$API/v1/types" \
    | "$SG_PY" -c 'import json,sys; t={x["name"]:x for x in json.load(sys.stdin)["types"]}; sys.exit(set(t["python"]["nodes"])!={"c1","c2"})'
}

check() {
  apt_install docker-compose
  [ -s "$SG_STATE/token" ] || die "no tenant token: run make services first"
  [ -s "$SG_SECRETS" ] || die "no generated credentials ($SG_SECRETS): run make services first"
  [ -s "$SANDGRID_FLOWER_PASSWORD_FILE" ] \
    || (umask 077; "$SG_PY" -c 'import secrets; print(secrets.token_urlsafe(18))' >"$SANDGRID_FLOWER_PASSWORD_FILE")
  trap down EXIT
  down
  [ -x "$SG_BIN/minio" ] || die "no MinIO binary in $SG_BIN: run make services first"
  mkdir -p "$SG_ROOT/.build/minio"  # the minio image's build context: the binary alone
  cmp -s "$SG_BIN/minio" "$SG_ROOT/.build/minio/minio" || cp "$SG_BIN/minio" "$SG_ROOT/.build/minio/minio"
  log "compose: building redis and minio images, starting the stack"
  compose build -q redis minio >"$SG_LOG/compose-build.log" 2>&1 \
    || { tail -n 30 "$SG_LOG/compose-build.log"; die "docker-compose build failed"; }
  compose up -d >"$SG_LOG/compose-up.log" 2>&1 \
    || { tail -n 30 "$SG_LOG/compose-up.log"; die "docker-compose up failed"; }
  wait_for "the compose stack's workers" 120 serving
  wait_for "the compose stack's flower" 60 curl_auth "admin:$(cat "$SANDGRID_FLOWER_PASSWORD_FILE")" \
    "http://127.0.0.1:$SANDGRID_FLOWER_PORT/healthcheck"
  export SANDGRID_TOKEN="$(cat "$SG_STATE/token")" SANDGRID_API_URL="$API"
  log "compose: main job"
  "$SG_PY" "$SG_ROOT/deploy/local/main_job.py"
  log "compose: a batch of 8 jobs"
  local work; work="$(mktemp -d)"
  for i in $(seq 1 8); do
    printf '{"id": "job-%d", "python": "print(%d * %d)"}\n' "$i" "$i" "$i"
  done >"$work/jobs.jsonl"
  "$SG_VENV/bin/sandgrid" batch run "$work/jobs.jsonl" --out "$work/results.jsonl" --concurrency 4
  "$SG_PY" - "$work/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ok = {r["id"]: r["stdout"].strip() for r in rows if r.get("status") == "ok"}
want = {f"job-{i}": str(i * i) for i in range(1, 9)}
sys.exit(0 if ok == want else f"batch results differ: {ok} != {want}")
PY
  rm -rf "$work"
  log "compose: taking the stack down"
  trap - EXIT
  down
  local rest; rest="$(left)"
  [ -z "$rest" ] || die "compose: left behind after down: $rest"
  log "compose: up, main job, batch, down: nothing left behind"
}

case "${1:-check}" in
  check) check ;;
  down) down ;;
  *) die "usage: compose.sh check|down" ;;
esac
