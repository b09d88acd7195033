#!/usr/bin/env bash
# The grid's generated secrets, made once, each a 0600 file in $SG_STATE
# (docs/operations.md, "Credentials"):
#   metrics-token    the bearer token of GET /v1/metrics/targets (Prometheus)
#   flower-password  Flower's basic auth (user admin)
source "$(dirname "$0")/lib.sh"

# make_secret FILE PREFIX: a random token in FILE (0600), unless it has one.
make_secret() {
  [ -s "$1" ] && { chmod 600 "$1"; return 0; }
  (umask 077; "$SG_PY" -c "import secrets,sys; print(sys.argv[1] + secrets.token_urlsafe(32))" "$2" >"$1")
  log "credentials: made $1"
}

make_secret "$SANDGRID_METRICS_TOKEN_FILE" sgm_
make_secret "$SG_STATE/flower-password" ""
