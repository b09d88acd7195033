#!/usr/bin/env bash
# Download the image's wheels, with their dependencies, on the host (which
# trusts its own CA bundle and reaches PyPI), so that the build itself needs no
# index access. Idempotent: skipped when the wheels of this requirements.txt
# are already there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${SG_PY:-python3}"
want="$(sha256sum "$here/requirements.txt" | cut -c1-16)"
[ "$(cat "$here/wheels/.inputs" 2>/dev/null)" = "$want" ] && exit 0
rm -rf "$here/wheels" && mkdir -p "$here/wheels"
"$py" -m pip download -q --only-binary=:all: -d "$here/wheels" -r "$here/requirements.txt"
cp "$here/requirements.txt" "$here/wheels/requirements.txt"
echo "$want" >"$here/wheels/.inputs"
