#!/usr/bin/env bash
# Stop what up.sh started, by PID; with --all also the registry, Redis, MinIO and dockerd.
source "$(dirname "$0")/lib.sh"
for name in flower scheduler $(cd "$SG_RUN" && ls worker-*.pid 2>/dev/null | sed 's/\.pid$//'); do
  stop_pid "$name"
done
if [ "${1:-}" = "--all" ]; then
  stop_pid registry; stop_pid minio; stop_pid redis; stop_pid dockerd
fi
log "down: stopped"
