# Shared helpers of the local bring-up scripts. Sourced, never run.
# Every step is idempotent: it checks for what it would make and skips it.
set -euo pipefail

SG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SG_STATE="${SANDGRID_STATE_DIR:-/var/lib/sandgrid}"
SG_RUN="${SANDGRID_RUN_DIR:-$SG_STATE/run}"
SG_LOG="${SANDGRID_LOG_DIR:-$SG_STATE/log}"
SG_BIN="${SANDGRID_BIN_DIR:-$SG_STATE/bin}"
export PATH="$SG_BIN:/usr/local/go/bin:/root/go/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$SG_STATE" "$SG_RUN" "$SG_LOG" "$SG_BIN"
# Logs name tenants, sessions and the grid's own addresses: only the grid's user
# and its group read them (issue 23, item 4; docs/operations.md, Logs).
chmod 0750 "$SG_LOG"

log() { printf '\033[1;34m[sandgrid]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[sandgrid] error:\033[0m %s\n' "$*" >&2; exit 1; }

# Use Debian's docker client (it matches the daemon); another may be first on PATH.
docker() { /usr/bin/docker "$@"; }

apt_updated=0
# apt_install PKG...: install the Debian packages that are missing.
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$apt_updated" = 0 ]; then apt-get update -q >/dev/null; apt_updated=1; fi
  log "apt-get install ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# pid_alive NAME: is the process recorded in $SG_RUN/NAME.pid running?
pid_alive() {
  local f="$SG_RUN/$1.pid"
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

# private_log PATH: make PATH a log file of mode 0640 (created under umask 027,
# an existing one chmod'ed), for a process to append to. Only the file: the
# process itself keeps the usual umask (what it creates has its own modes).
private_log() {
  (umask 027; : >>"$1")
  chmod 0640 "$1"
}

# start_bg NAME CMD...: start CMD in the background, its PID in $SG_RUN/NAME.pid,
# its output appended to $SG_LOG/NAME.log (0640).
start_bg() {
  local name="$1"; shift
  if pid_alive "$name"; then return 0; fi
  private_log "$SG_LOG/$name.log"
  setsid nohup "$@" >>"$SG_LOG/$name.log" 2>&1 </dev/null &
  echo $! >"$SG_RUN/$name.pid"
}

# wait_for DESC SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
  local desc="$1" secs="$2"; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $end ] && die "$desc did not come up in ${secs}s (logs: $SG_LOG)"
    sleep 0.2
  done
}

# curl_auth USER:PASSWORD URL...: curl -sf with basic auth given on stdin, so the
# password is not on curl's command line (readable in ps by every local user).
curl_auth() {
  local cred="$1"; shift
  printf 'user = "%s"\n' "$cred" | curl -sf -K - "$@"
}

# stop_pid NAME: stop the process recorded in $SG_RUN/NAME.pid, and its group.
stop_pid() {
  local f="$SG_RUN/$1.pid" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# The generated credentials (credentials.sh, 23.19): read as shell variables,
# never exported as a whole; each process gets only its own role's (grid.sh).
SG_SECRETS="$SG_STATE/secrets.env"
SG_MINIO_ACCESS_KEY="" SG_MINIO_SECRET_KEY=""
SG_REDIS_PW_ADMIN="" SG_REDIS_PW_API="" SG_REDIS_PW_WORKER="" SG_REDIS_PW_FLOWER="" SG_REDIS_PW_METRICS=""
SG_REGISTRY_S3_ACCESS_KEY="" SG_REGISTRY_S3_SECRET_KEY="" SG_REGISTRY_HTTP_SECRET=""  # 25.3
# shellcheck disable=SC1090  # KEY=VALUE lines of URL-safe tokens
if [ -r "$SG_SECRETS" ]; then source "$SG_SECRETS"; fi
SG_REDIS_PORT="${SANDGRID_REDIS_PORT:-6379}"
# What an earlier sourcing derived (before credentials.sh made the secrets, say) is
# derived again here, never taken as given: only an operator's own value wins.
if [ "${SG_DERIVED_REDIS_URL:-}" = 1 ]; then unset SANDGRID_REDIS_URL; fi
if [ "${SG_DERIVED_MINIO_KEYS:-}" = 1 ]; then
  unset SANDGRID_MINIO__ACCESS_KEY SANDGRID_MINIO__SECRET_KEY
fi
SG_REDIS_URL_GIVEN="${SANDGRID_REDIS_URL:-}"

# redis_url ROLE: the grid's Redis as ROLE (admin, api, worker, flower, metrics),
# with the role's password once generated; SANDGRID_REDIS_URL, when given, wins.
# SANDGRID_REDIS_SENTINEL=1: the sentinels of sentinel.sh instead (22.5).
redis_url() {
  local pw="SG_REDIS_PW_${1^^}"
  if [ -n "$SG_REDIS_URL_GIVEN" ]; then echo "$SG_REDIS_URL_GIVEN"
  elif [ "${SANDGRID_REDIS_SENTINEL:-}" = 1 ] && [ -n "${!pw:-}" ]; then
    read -r _ _ s1 s2 s3 <<<"${SANDGRID_SENTINEL_PORTS:-6380 6381 26379 26380 26381}"
    echo "sentinel://sg-$1:${!pw}@127.0.0.1:$s1,127.0.0.1:$s2,127.0.0.1:$s3/0?master=${SANDGRID_SENTINEL_MASTER:-sandgrid}"
  elif [ -n "${!pw:-}" ]; then echo "redis://sg-$1:${!pw}@127.0.0.1:$SG_REDIS_PORT/0"
  else echo "redis://127.0.0.1:$SG_REDIS_PORT/0"; fi
}

# Settings shared with the Python side (scheduler/settings.py reads SANDGRID_*).
if [ -z "$SG_REDIS_URL_GIVEN" ]; then export SG_DERIVED_REDIS_URL=1; fi
if [ -z "${SANDGRID_MINIO__ACCESS_KEY:-}" ]; then export SG_DERIVED_MINIO_KEYS=1; fi
export SANDGRID_REDIS_URL="${SANDGRID_REDIS_URL:-$(redis_url api)}"
export SANDGRID_MINIO__ENDPOINT="${SANDGRID_MINIO__ENDPOINT:-127.0.0.1:9000}"
export SANDGRID_MINIO__ACCESS_KEY="${SANDGRID_MINIO__ACCESS_KEY:-${SG_MINIO_ACCESS_KEY:-sandgrid}}"
export SANDGRID_MINIO__SECRET_KEY="${SANDGRID_MINIO__SECRET_KEY:-${SG_MINIO_SECRET_KEY:-sandgrid-secret}}"
# The grid's image registry (25.3, registry.sh): its address, the one the
# workers pull from (SANDGRID_IMAGES__REGISTRY), and its bucket in MinIO.
export SANDGRID_IMAGES__REGISTRY="${SANDGRID_IMAGES__REGISTRY:-127.0.0.1:5000}"
SG_REGISTRY_BUCKET="${SANDGRID_REGISTRY_BUCKET:-sandgrid-registry}"
# The operators' token of GET /v1/metrics/targets (credentials.sh makes it)
export SANDGRID_METRICS_TOKEN_FILE="${SANDGRID_METRICS_TOKEN_FILE:-$SG_STATE/metrics-token}"

SG_VENV="${SANDGRID_VENV:-$SG_ROOT/.venv}"
SG_PY="$SG_VENV/bin/python"
export PATH="$SG_VENV/bin:$PATH"
