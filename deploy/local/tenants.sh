#!/usr/bin/env bash
# A local tenant "dev" and its token, made once: $SG_STATE/token (0600).
# The tenants file holds only the token's sha256.
source "$(dirname "$0")/lib.sh"
tok="$SG_STATE/token"
if [ ! -s "$tok" ]; then
  (umask 077; "$SG_PY" -c 'import secrets; print("sgt_" + secrets.token_urlsafe(32))' >"$tok")
  log "tenants: made a token for tenant 'dev' in $tok"
fi
"$SG_PY" - "$tok" "$SG_STATE/tenants.json" <<'PY'
import hashlib, json, sys
token = open(sys.argv[1]).read().strip()
digest = hashlib.sha256(token.encode()).hexdigest()
want = {"tenants": [{"name": "dev", "token_sha256": digest}]}
try:
    have = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    have = None
if have != want:
    json.dump(want, open(sys.argv[2], "w"), indent=2)
PY
