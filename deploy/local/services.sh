#!/usr/bin/env bash
# Everything the grid and its tests stand on: Docker (with runsc), Redis, MinIO,
# the image registry (its blobs in MinIO), images (pushed there), the Python
# environment, the generated credentials, Prometheus.
# Idempotent: a second run takes seconds.
source "$(dirname "$0")/lib.sh"
here="$(dirname "$0")"
[ "$(id -u)" = 0 ] || die "run as root (it installs Debian packages and starts dockerd)"
"$here/python.sh"
"$here/credentials.sh"
"$here/runsc.sh" || log "runsc: build FAILED; the runsc runtime will be missing (see README)"
"$here/docker.sh"
"$here/redis.sh"
"$here/minio.sh"
"$here/registry.sh"
"$here/images.sh"
"$here/tenants.sh"
"$here/prometheus.sh"
"$here/runsc-check.sh"
