#!/usr/bin/env bash
# Redis from Debian's redis-server, on loopback only, no persistence to /var.
source "$(dirname "$0")/lib.sh"
apt_install redis-server redis-tools
if redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
  log "redis: running"; exit 0
fi
mkdir -p "$SG_STATE/redis"
start_bg redis redis-server --bind 127.0.0.1 --port 6379 --protected-mode yes \
  --dir "$SG_STATE/redis" --save "" --appendonly no --maxclients 10000 --daemonize no
wait_for "redis" 30 bash -c 'redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG'
log "redis: running on 127.0.0.1:6379"
