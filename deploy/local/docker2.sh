#!/usr/bin/env bash
# A second Docker engine beside the main one (docker.sh), for tests that must
# restart an engine without disturbing the others: its own data root, exec
# root, pid file and Unix socket, no bridge, no iptables, runc (and runsc when
# it has been built). Its state lives in $SANDGRID_DOCKER2_DIR, so the images
# loaded into it are kept between runs.
#
#   docker2.sh start   start it (idempotent); DOCKER_HOST=unix://$DIR/run/docker.sock
#   docker2.sh stop    stop it by its pid file (its containers stop with it)
source "$(dirname "$0")/lib.sh"

DIR="${SANDGRID_DOCKER2_DIR:-$SG_STATE/docker2}"
SOCK="$DIR/run/docker.sock"
PIDFILE="$DIR/run/dockerd.pid"
mkdir -p "$DIR/data" "$DIR/exec" "$DIR/run"

up() { DOCKER_HOST="unix://$SOCK" /usr/bin/docker info; }

config() {
  python3 - "$SG_BIN/runsc" <<'PY'
import json, os, sys
cfg = {"log-level": "warn"}
if os.access(sys.argv[1], os.X_OK):
    cfg["runtimes"] = {"runsc": {"path": sys.argv[1], "runtimeArgs": ["--platform=systrap", "--network=none", "--host-uds=open"]}}
    # Template builds: the root's overlay in memory, bounded by the build's quota (docker.sh).
    cfg["runtimes"]["runsc-build"] = {"path": sys.argv[1], "runtimeArgs": ["--platform=systrap", "--network=none", "--host-uds=open", "--overlay2=root:memory"]}
print(json.dumps(cfg, indent=2, sort_keys=True))
PY
}

start() {
  if up >/dev/null 2>&1; then log "docker2: running on $SOCK"; return 0; fi
  config >"$DIR/daemon.json"
  rm -f "$PIDFILE" "$SOCK"
  private_log "$DIR/dockerd.log"
  setsid nohup dockerd --config-file "$DIR/daemon.json" --data-root "$DIR/data" \
    --exec-root "$DIR/exec" --pidfile "$PIDFILE" -H "unix://$SOCK" \
    --bridge=none --iptables=false --ip-masq=false --cgroup-parent=/sandgrid-docker2 \
    >>"$DIR/dockerd.log" 2>&1 </dev/null &
  wait_for "docker2" 60 up
  log "docker2: running on $SOCK"
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid="$(cat "$PIDFILE")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
  log "docker2: stopped"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: docker2.sh start|stop" ;;
esac
