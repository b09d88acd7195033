#!/usr/bin/env bash
# MinIO server, built from source (MinIO ships as source only), on loopback,
# with its own data directory and the credentials of the SANDGRID_MINIO__* settings.
source "$(dirname "$0")/lib.sh"
apt_install curl ca-certificates
if [ ! -x "$SG_BIN/minio" ]; then
  log "minio: building with go install github.com/minio/minio@latest (several minutes)"
  GOBIN="$SG_BIN" go install github.com/minio/minio@latest
fi
host="${SANDGRID_MINIO__ENDPOINT%:*}"; port="${SANDGRID_MINIO__ENDPOINT##*:}"
ready() { curl -sf "http://$SANDGRID_MINIO__ENDPOINT/minio/health/ready"; }
if ready >/dev/null 2>&1; then log "minio: running"; exit 0; fi
mkdir -p "$SG_STATE/minio"
MINIO_ROOT_USER="$SANDGRID_MINIO__ACCESS_KEY" MINIO_ROOT_PASSWORD="$SANDGRID_MINIO__SECRET_KEY" \
MINIO_BROWSER=off MINIO_UPDATE=off \
  start_bg minio "$SG_BIN/minio" server --quiet --address "$host:$port" "$SG_STATE/minio"
wait_for "minio" 60 ready
log "minio: running on $SANDGRID_MINIO__ENDPOINT"
