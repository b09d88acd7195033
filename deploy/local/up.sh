#!/usr/bin/env bash
# One command from a bare Debian 12 machine to a working grid doing real work.
source "$(dirname "$0")/lib.sh"
here="$(dirname "$0")"
"$here/services.sh"
if [ "${SANDGRID_REDIS_SENTINEL:-}" = 1 ]; then "$here/sentinel.sh"; fi  # 22.5, opt-in
"$here/grid.sh"
log "main job: a session writes a file, runs Python that reads it, and closes"
SANDGRID_TOKEN="$(cat "$SG_STATE/token")" SANDGRID_API_URL="http://127.0.0.1:${SANDGRID_API_PORT:-8700}" \
  "$SG_PY" "$here/main_job.py"
