#!/usr/bin/env bash
# Redis from Debian's redis-server, on loopback only (port SANDGRID_REDIS_PORT,
# default 6379), with AOF persistence (appendonly, fsync every second) in
# $SG_STATE/redis: a restart keeps sessions, tenants and batches. Its users are
# the ACL file credentials.sh wrote (one password per role, `default` off).
# A running Redis without AOF gets it live (CONFIG SET, and CONFIG REWRITE when
# it has a config file); if that is refused, our own redis-server is restarted
# with it. A running Redis that still lets anyone in without a password (the
# setup before 23.19) is restarted with the ACL file when it is ours (the AOF
# keeps its data), and otherwise the operator is told what to do.
source "$(dirname "$0")/lib.sh"
apt_install redis-server redis-tools
mkdir -p "$SG_STATE/redis"
ACL="$SG_STATE/redis/users.acl"
PORT="$SG_REDIS_PORT"
# redis-cli as the admin role: the password through the environment, not argv
rcli() {
  if [ -n "$SG_REDIS_PW_ADMIN" ]; then
    REDISCLI_AUTH="$SG_REDIS_PW_ADMIN" redis-cli --no-auth-warning --user sg-admin -h 127.0.0.1 -p "$PORT" "$@"
  else
    redis-cli -h 127.0.0.1 -p "$PORT" "$@"
  fi
}
redis_up() { rcli ping 2>/dev/null | grep -q PONG; }
# ours: the redis-server of our pid file, and on this port (its title: redis-server HOST:PORT)
ours() {
  pid_alive redis && tr '\0' ' ' <"/proc/$(cat "$SG_RUN/redis.pid")/cmdline" | grep -qE -- "(:|--port )$PORT( |\$)"
}
anon_ping() { redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null | grep -q PONG; }

start_redis() {
  local users=()
  [ -s "$ACL" ] && users=(--aclfile "$ACL")
  start_bg redis redis-server --bind 127.0.0.1 --port "$PORT" --protected-mode yes \
    --dir "$SG_STATE/redis" --save "" --appendonly yes --appendfsync everysec \
    --maxclients 10000 --daemonize no "${users[@]}"
  wait_for "redis" 60 redis_up
}

# Open to anyone while we have credentials: restart ours with them, or stop here.
if [ -s "$ACL" ] && anon_ping; then
  ours || die "redis on 127.0.0.1:$PORT answers without a password and is not ours \
($SG_RUN/redis.pid): restart it with --aclfile $ACL (users: docs/operations.md, Credentials), \
or stop it and run make services again"
  log "redis: running without passwords; restarting ours with the ACL users of $ACL (AOF keeps the data)"
  stop_pid redis
fi

if redis_up; then
  if [ -s "$ACL" ] && [ "$(rcli config get aclfile | sed -n 2p)" = "$ACL" ]; then
    rcli acl load >/dev/null || die "redis: ACL LOAD of $ACL refused"  # new passwords apply at once
  fi
  if rcli config get appendonly | grep -qx yes; then
    log "redis: running, with AOF"; exit 0
  fi
  if rcli config set appendfsync everysec | grep -q OK && rcli config set appendonly yes | grep -q OK; then
    rcli config rewrite >/dev/null 2>&1 || true  # no config file: the next start passes --appendonly
    log "redis: running; AOF turned on"; exit 0
  fi
  ours || die "redis on :$PORT refuses AOF and is not ours ($SG_RUN/redis.pid); turn it on there"
  log "redis: restarting ours with AOF"
  stop_pid redis
fi
start_redis
log "redis: running on 127.0.0.1:$PORT (AOF in $SG_STATE/redis, users in $ACL)"
