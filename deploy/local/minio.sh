#!/usr/bin/env bash
# MinIO server, built from source (MinIO ships as source only), on loopback,
# with its own data directory and the credentials of the SANDGRID_MINIO__*
# settings: the generated ones of secrets.env (credentials.sh) once made. A
# running MinIO that does not take them (still on the shipped sandgrid /
# sandgrid-secret) is restarted with them when it is ours (its data stays),
# and otherwise the operator is told.
source "$(dirname "$0")/lib.sh"
apt_install curl ca-certificates
if [ ! -x "$SG_BIN/minio" ]; then
  log "minio: building with go install github.com/minio/minio@latest (several minutes)"
  GOBIN="$SG_BIN" go install github.com/minio/minio@latest
fi
host="${SANDGRID_MINIO__ENDPOINT%:*}"; port="${SANDGRID_MINIO__ENDPOINT##*:}"
ready() { curl -sf "http://$SANDGRID_MINIO__ENDPOINT/minio/health/ready"; }
# takes_ours: do the current SANDGRID_MINIO__* credentials work (a signed request)?
takes_ours() {
  [ -x "$SG_PY" ] || return 0  # no venv yet (python.sh makes it first): nothing to sign with
  "$SG_PY" - <<'PY'
import os, sys
from minio import Minio
from minio.error import S3Error
c = Minio(os.environ["SANDGRID_MINIO__ENDPOINT"], os.environ["SANDGRID_MINIO__ACCESS_KEY"],
          os.environ["SANDGRID_MINIO__SECRET_KEY"], secure=False)
try:
    c.list_buckets()
except S3Error as exc:
    sys.exit(f"minio: {exc.code}")
PY
}
if ready >/dev/null 2>&1; then
  if takes_ours 2>/dev/null; then log "minio: running"; exit 0; fi
  pid_alive minio || die "minio on $SANDGRID_MINIO__ENDPOINT refuses the credentials of $SG_SECRETS \
and is not ours ($SG_RUN/minio.pid): restart it with MINIO_ROOT_USER/MINIO_ROOT_PASSWORD from there"
  log "minio: running with other credentials; restarting ours with those of $SG_SECRETS"
  stop_pid minio
fi
mkdir -p "$SG_STATE/minio"
MINIO_ROOT_USER="$SANDGRID_MINIO__ACCESS_KEY" MINIO_ROOT_PASSWORD="$SANDGRID_MINIO__SECRET_KEY" \
MINIO_BROWSER=off MINIO_UPDATE=off \
  start_bg minio "$SG_BIN/minio" server --quiet --address "$host:$port" "$SG_STATE/minio"
wait_for "minio" 60 ready
takes_ours || die "minio: started, but refuses the credentials it was started with"
log "minio: running on $SANDGRID_MINIO__ENDPOINT"
