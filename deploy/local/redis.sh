#!/usr/bin/env bash
# Redis from Debian's redis-server, on loopback only, with AOF persistence (appendonly,
# fsync every second) in $SG_STATE/redis: a restart keeps sessions, tenants and batches.
# A running Redis without AOF gets it live (CONFIG SET, and CONFIG REWRITE when it has
# a config file); if that is refused, our own redis-server is restarted with it.
source "$(dirname "$0")/lib.sh"
apt_install redis-server redis-tools
mkdir -p "$SG_STATE/redis"
rcli() { redis-cli -h 127.0.0.1 -p 6379 "$@"; }

start_redis() {
  start_bg redis redis-server --bind 127.0.0.1 --port 6379 --protected-mode yes \
    --dir "$SG_STATE/redis" --save "" --appendonly yes --appendfsync everysec \
    --maxclients 10000 --daemonize no
  wait_for "redis" 60 bash -c 'redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG'
}

if rcli ping 2>/dev/null | grep -q PONG; then
  if rcli config get appendonly | grep -qx yes; then
    log "redis: running, with AOF"; exit 0
  fi
  if rcli config set appendfsync everysec | grep -q OK && rcli config set appendonly yes | grep -q OK; then
    rcli config rewrite >/dev/null 2>&1 || true  # no config file: the next start passes --appendonly
    log "redis: running; AOF turned on"; exit 0
  fi
  pid_alive redis || die "redis on :6379 refuses AOF and is not ours ($SG_RUN/redis.pid); turn it on there"
  log "redis: restarting ours with AOF"
  stop_pid redis
fi
start_redis
log "redis: running on 127.0.0.1:6379 (AOF in $SG_STATE/redis)"
