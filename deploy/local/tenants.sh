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
path = sys.argv[2]
try:
    data = json.load(open(path))
except (OSError, ValueError):
    data = {}
data.setdefault("tenants", {})
h = hashlib.sha256(token.encode()).hexdigest()
data["tenants"].setdefault("dev", {"token_sha256": [h]})
if h not in data["tenants"]["dev"].setdefault("token_sha256", []):
    data["tenants"]["dev"]["token_sha256"].append(h)
json.dump(data, open(path, "w"), indent=2)
PY
