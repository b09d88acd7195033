#!/usr/bin/env bash
# The grid's image registry (issue 25, item 3): Debian's docker-registry (the
# CNCF distribution server) on loopback ($SANDGRID_IMAGES__REGISTRY, default
# 127.0.0.1:5000), storing its blobs in MinIO (the s3 driver, bucket
# $SANDGRID_REGISTRY_BUCKET, default sandgrid-registry) as its own MinIO user
# (SG_REGISTRY_S3_* of secrets.env, credentials.sh) whose policy reaches that
# bucket only. Its config (it holds that user's secret) is a 0600 file of
# $SG_STATE/registry. Idempotent: a registry of ours with the same config is
# left running; one with another config is restarted.
#
#   registry.sh [start]  start it (after minio.sh)
#   registry.sh gc       garbage-collect: blobs no manifest references are deleted
#                        (ours is stopped meanwhile: the server's rule for a safe run)
#   registry.sh stop     stop ours
source "$(dirname "$0")/lib.sh"

ADDR="$SANDGRID_IMAGES__REGISTRY"
DIR="$SG_STATE/registry"
CONFIG="$DIR/config.yml"
mkdir -p "$DIR"
chmod 700 "$DIR"

up() { curl -sf "http://$ADDR/v2/" >/dev/null; }

# minio_user: the bucket, a policy of that bucket alone, and the registry's user with it.
minio_user() {
  [ -n "$SG_REGISTRY_S3_ACCESS_KEY" ] || die "registry: no SG_REGISTRY_S3_* in $SG_SECRETS (run credentials.sh)"
  SG_REGISTRY_S3_ACCESS_KEY="$SG_REGISTRY_S3_ACCESS_KEY" SG_REGISTRY_S3_SECRET_KEY="$SG_REGISTRY_S3_SECRET_KEY" \
  SG_REGISTRY_BUCKET="$SG_REGISTRY_BUCKET" "$SG_PY" - <<'PY'
import json, os
from minio import Minio, MinioAdmin
from minio.credentials import StaticProvider
endpoint, bucket = os.environ["SANDGRID_MINIO__ENDPOINT"], os.environ["SG_REGISTRY_BUCKET"]
root = (os.environ["SANDGRID_MINIO__ACCESS_KEY"], os.environ["SANDGRID_MINIO__SECRET_KEY"])
client = Minio(endpoint, *root, secure=False)
if not client.bucket_exists(bucket):
    client.make_bucket(bucket)
policy = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
     "Resource": [f"arn:aws:s3:::{bucket}"]},
    {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                                   "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
     "Resource": [f"arn:aws:s3:::{bucket}/*"]}]}
admin = MinioAdmin(endpoint=endpoint, credentials=StaticProvider(*root), secure=False)
name = "sandgrid-registry"
admin.policy_add(name, policy=policy)
admin.user_add(os.environ["SG_REGISTRY_S3_ACCESS_KEY"], os.environ["SG_REGISTRY_S3_SECRET_KEY"])
if name not in json.loads(admin.user_info(os.environ["SG_REGISTRY_S3_ACCESS_KEY"])).get("policyName", ""):
    admin.attach_policy([name], user=os.environ["SG_REGISTRY_S3_ACCESS_KEY"])
PY
}

config() {
  cat <<EOF
# made by deploy/local/registry.sh; keep 0600 (it holds the registry's MinIO secret)
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
  fields:
    service: sandgrid-registry
storage:
  s3:
    accesskey: $SG_REGISTRY_S3_ACCESS_KEY
    secretkey: $SG_REGISTRY_S3_SECRET_KEY
    region: us-east-1
    regionendpoint: http://$SANDGRID_MINIO__ENDPOINT
    bucket: $SG_REGISTRY_BUCKET
    secure: false
    v4auth: true
  delete:
    enabled: true
  redirect:
    disable: true
  cache:
    blobdescriptor: inmemory
http:
  addr: $ADDR
  secret: $SG_REGISTRY_HTTP_SECRET
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
EOF
}

start() {
  apt_install docker-registry curl
  minio_user
  local want; want="$(config)"
  if [ "$(cat "$CONFIG" 2>/dev/null)" != "$want" ]; then
    (umask 077; printf '%s\n' "$want" >"$CONFIG")
    if pid_alive registry; then log "registry: config changed, restarting"; stop_pid registry; fi
  fi
  chmod 600 "$CONFIG"
  if up; then
    pid_alive registry || log "registry: $ADDR answers but is not ours ($SG_RUN/registry.pid); left as it is"
    log "registry: running on $ADDR"; return 0
  fi
  # AWS_CA_BUNDLE (set on some machines) makes the s3 driver panic ("custom CA
  # bundle ... unsupported transport"); it talks plain HTTP to loopback MinIO.
  start_bg registry env -u AWS_CA_BUNDLE docker-registry serve "$CONFIG"
  wait_for "registry" 60 up
  log "registry: running on $ADDR (blobs in MinIO bucket $SG_REGISTRY_BUCKET)"
}

gc() {
  [ -f "$CONFIG" ] || die "registry: no $CONFIG (run registry.sh start first)"
  local was_up=0 rc=0 n
  if pid_alive registry; then was_up=1; stop_pid registry; fi
  log "registry: garbage-collect (untagged manifests and unreferenced blobs)"
  env -u AWS_CA_BUNDLE docker-registry garbage-collect --delete-untagged "$CONFIG" \
    >"$SG_LOG/registry-gc.log" 2>&1 || rc=$?
  if [ "$was_up" = 1 ]; then start; fi
  [ "$rc" = 0 ] || { tail -n 20 "$SG_LOG/registry-gc.log"; die "registry: garbage-collect failed"; }
  n="$(grep -c 'blob eligible for deletion' "$SG_LOG/registry-gc.log" || true)"
  log "registry: garbage-collect deleted $n blob(s) (log: $SG_LOG/registry-gc.log)"
}

case "${1:-start}" in
  start) start ;;
  gc) gc ;;
  stop) stop_pid registry; log "registry: stopped" ;;
  *) die "usage: registry.sh start|gc|stop" ;;
esac
