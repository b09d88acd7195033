#!/usr/bin/env bash
# Redis without a single point of failure (issue 22.5), opt-in: a primary, a
# replica and three sentinels from Debian's redis-server and redis-sentinel, on
# loopback ports of their own (primary 6380, replica 6381, sentinels
# 26379-26381; SANDGRID_SENTINEL_PORTS="P R S1 S2 S3" to move them). The main
# Redis on 6379 is not touched. The grid uses it with
#   SANDGRID_REDIS_SENTINEL=1 make up      (lib.sh's redis_url gives each role
#   sentinel://sg-ROLE:PW@127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/0?master=sandgrid)
# Every server has the grid's ACL users (credentials.sh's users.acl); the
# sentinels have them too, so a client's one user and password reach both. The
# replica and the sentinels authenticate as sg-admin. Passwords go into 0600
# config files in $SG_SENTINEL_DIR, never onto a command line (ps shows those).
# A sentinel sees the primary down after 1 s and a quorum of 2 fails it over.
#   sentinel.sh          start what is missing (idempotent), wait until the
#                        sentinels agree on a primary with a replica
#   sentinel.sh stop     stop the five processes (their data stays)
source "$(dirname "$0")/lib.sh"
apt_install redis-server redis-tools redis-sentinel
# Debian's package starts its own sentinel on 26379 where systemd runs: not ours.
if command -v systemctl >/dev/null && systemctl is-active -q redis-sentinel 2>/dev/null; then
  systemctl disable --now -q redis-sentinel || true
fi
SG_SENTINEL_DIR="${SANDGRID_SENTINEL_DIR:-$SG_STATE/sentinel}"
read -r P_PORT R_PORT S1 S2 S3 <<<"${SANDGRID_SENTINEL_PORTS:-6380 6381 26379 26380 26381}"
MASTER="${SANDGRID_SENTINEL_MASTER:-sandgrid}"
ACL="$SG_STATE/redis/users.acl"
SENTINEL_ASK="resetchannels &__sentinel__:* -@all +ping +auth +hello +role +client|setname \
+client|getname +subscribe +psubscribe +unsubscribe +punsubscribe +sentinel|get-master-addr-by-name \
+sentinel|masters +sentinel|master +sentinel|sentinels +sentinel|slaves +sentinel|replicas"

if [ "${1:-}" = stop ]; then
  for n in sentinel-$S3 sentinel-$S2 sentinel-$S1 redis-$R_PORT redis-$P_PORT; do stop_pid "$n"; done
  log "sentinel: stopped"; exit 0
fi
[ -s "$ACL" ] && [ -n "$SG_REDIS_PW_ADMIN" ] || die "sentinel: no ACL users yet ($ACL): run credentials.sh (make services) first"
mkdir -p "$SG_SENTINEL_DIR"; chmod 0700 "$SG_SENTINEL_DIR"

# server_conf PORT [PRIMARY_PORT]: a data server's config; a replica's names its primary
server_conf() {
  local dir="$SG_SENTINEL_DIR/redis-$1"
  mkdir -p "$dir"
  [ -s "$dir/redis.conf" ] && return 0  # sentinel rewrites it (replicaof) after a failover
  (umask 077; cat >"$dir/redis.conf" <<EOF
bind 127.0.0.1
port $1
protected-mode yes
daemonize no
dir $dir
save ""
appendonly yes
appendfsync everysec
maxclients 10000
aclfile $ACL
masteruser sg-admin
masterauth $SG_REDIS_PW_ADMIN
EOF
  if [ -n "${2:-}" ]; then echo "replicaof 127.0.0.1 $2" >>"$dir/redis.conf"; fi)
}

# sentinel_conf PORT: a sentinel's config (it rewrites it with what it learns)
sentinel_conf() {
  local dir="$SG_SENTINEL_DIR/sentinel-$1"
  mkdir -p "$dir"
  [ -s "$dir/sentinel.conf" ] && return 0
  (umask 077; {
    echo "bind 127.0.0.1"; echo "port $1"; echo "protected-mode yes"; echo "daemonize no"
    echo "dir $dir"
    echo "user default off resetpass nocommands"
    # the same users and passwords; a sentinel holds no data, and only sg-admin
    # may change it (SENTINEL SET, FAILOVER...): the others may only ask where
    # the primary is, as redis-py's and kombu's Sentinel clients do
    awk -v ask="$SENTINEL_ASK" '$1 == "user" && $2 != "default" {
      print $1, $2, $3, $4, ($2 == "sg-admin" ? "~* &* +@all" : ask) }' "$ACL"
    echo "sentinel sentinel-user sg-admin"; echo "sentinel sentinel-pass $SG_REDIS_PW_ADMIN"
    echo "sentinel monitor $MASTER 127.0.0.1 $P_PORT 2"
    echo "sentinel auth-user $MASTER sg-admin"; echo "sentinel auth-pass $MASTER $SG_REDIS_PW_ADMIN"
    echo "sentinel down-after-milliseconds $MASTER 1000"
    echo "sentinel failover-timeout $MASTER 10000"
    echo "sentinel parallel-syncs $MASTER 1"
  } >"$dir/sentinel.conf")
}

acli() { REDISCLI_AUTH="$SG_REDIS_PW_ADMIN" redis-cli --no-auth-warning --user sg-admin -h 127.0.0.1 -p "$@"; }
pong() { acli "$1" ping 2>/dev/null | grep -q PONG; }
agreed() {  # every sentinel knows the primary and at least one replica and two peers
  for s in $S1 $S2 $S3; do
    acli "$s" sentinel master "$MASTER" 2>/dev/null | tr '\n' ' ' |
      grep -qE 'num-slaves [1-9].*num-other-sentinels [2-9]' || return 1
  done
  local addr; addr="$(acli "$S1" sentinel get-master-addr-by-name "$MASTER" | sed -n 2p)"
  acli "$addr" info replication | grep -q 'connected_slaves:[1-9]'  # a replica streaming now
}

server_conf "$P_PORT"
server_conf "$R_PORT" "$P_PORT"
for p in $P_PORT $R_PORT; do
  start_bg "redis-$p" redis-server "$SG_SENTINEL_DIR/redis-$p/redis.conf"
  wait_for "redis :$p" 30 pong "$p"
done
for s in $S1 $S2 $S3; do
  sentinel_conf "$s"
  start_bg "sentinel-$s" redis-sentinel "$SG_SENTINEL_DIR/sentinel-$s/sentinel.conf"
done
wait_for "sentinels agreeing on $MASTER" 60 agreed
log "sentinel: $MASTER at $(acli "$S1" sentinel get-master-addr-by-name "$MASTER" | paste -sd:) \
watched by 127.0.0.1:$S1,$S2,$S3 (SANDGRID_REDIS_SENTINEL=1 makes the grid use them)"
