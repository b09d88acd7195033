#!/usr/bin/env bash
# The grid's generated secrets, made once (at the first `make services` /
# `make up`), each in a 0600 file of $SG_STATE (docs/operations.md, "Credentials"):
#   secrets.env      MinIO's root user and password (SG_MINIO_*), one Redis password
#                    per role (SG_REDIS_PW_ADMIN, _API, _WORKER, _FLOWER, _METRICS);
#                    the image registry's own MinIO user (SG_REGISTRY_S3_*, 25.3:
#                    registry.sh gives it a policy of its bucket only) and its HTTP
#                    secret; also docker-compose's --env-file (deploy/local/compose.sh)
#   redis/users.acl  the Redis ACL file of those roles (hashes only, redis_acl.py)
#   metrics-token    the bearer token of GET /v1/metrics/targets (Prometheus)
#   flower-password  Flower's basic auth (user admin)
# Idempotent: what exists is kept (chmod 600 again); the ACL file is rewritten
# only when the passwords changed. redis.sh and minio.sh apply them.
source "$(dirname "$0")/lib.sh"

# make_secret FILE PREFIX: a random token in FILE (0600), unless it has one.
make_secret() {
  [ -s "$1" ] && { chmod 600 "$1"; return 0; }
  (umask 077; "$SG_PY" -c "import secrets,sys; print(sys.argv[1] + secrets.token_urlsafe(32))" "$2" >"$1")
  log "credentials: made $1"
}

if [ ! -s "$SG_SECRETS" ]; then
  (umask 077; "$SG_PY" - >"$SG_SECRETS.new" <<'PY'
import secrets
print("# made by deploy/local/credentials.sh; keep 0600")
print(f"SG_MINIO_ACCESS_KEY=sg-{secrets.token_hex(8)}")
print(f"SG_MINIO_SECRET_KEY={secrets.token_urlsafe(32)}")
for role in ("ADMIN", "API", "WORKER", "FLOWER", "METRICS"):
    print(f"SG_REDIS_PW_{role}={secrets.token_urlsafe(32)}")
PY
  ) && mv "$SG_SECRETS.new" "$SG_SECRETS"
  log "credentials: made $SG_SECRETS (MinIO root credentials, a Redis password per role)"
fi
chmod 600 "$SG_SECRETS"
# The image registry's MinIO user (25.3), appended to a secrets.env made before it.
if ! grep -q '^SG_REGISTRY_S3_ACCESS_KEY=' "$SG_SECRETS"; then
  "$SG_PY" - >>"$SG_SECRETS" <<'PY'
import secrets
print(f"SG_REGISTRY_S3_ACCESS_KEY=sg-registry-{secrets.token_hex(6)}")
print(f"SG_REGISTRY_S3_SECRET_KEY={secrets.token_urlsafe(32)}")
print(f"SG_REGISTRY_HTTP_SECRET={secrets.token_urlsafe(32)}")
PY
  log "credentials: added the image registry's MinIO user to $SG_SECRETS"
fi
mkdir -p "$SG_STATE/redis"
acl="$SG_STATE/redis/users.acl"
want="$("$SG_PY" "$SG_ROOT/deploy/local/redis_acl.py" "$SG_SECRETS")"
if [ "$(cat "$acl" 2>/dev/null)" != "$want" ]; then
  (umask 077; printf '%s\n' "$want" >"$acl")
  log "credentials: wrote the Redis ACL file $acl"
fi
chmod 600 "$acl"
make_secret "$SANDGRID_METRICS_TOKEN_FILE" sgm_
make_secret "$SG_STATE/flower-password" ""
