#!/usr/bin/env bash
# gVisor's runsc, built with Go from the `go` branch of gvisor.dev/gvisor.
#
# The Go module proxy does not resolve the branch name (`@go` answers 403), but
# every pseudo-version it serves for gvisor.dev/gvisor is a commit of the `go`
# branch (the only branch with buildable Go sources). We pin the newest one that
# was tested here; override with RUNSC_VERSION.
source "$(dirname "$0")/lib.sh"
RUNSC_VERSION="${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}"

if [ -x "$SG_BIN/runsc" ] && [ "$(cat "$SG_BIN/runsc.version" 2>/dev/null)" = "$RUNSC_VERSION" ]; then
  log "runsc: built ($RUNSC_VERSION)"; exit 0
fi
log "runsc: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION with $(go version)"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init sandgrid-runsc-build >/dev/null 2>&1
go get "gvisor.dev/gvisor/runsc@$RUNSC_VERSION" >/dev/null 2>&1 || go get "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
CGO_ENABLED=0 go build -trimpath -o "$SG_BIN/runsc.new" gvisor.dev/gvisor/runsc
mv "$SG_BIN/runsc.new" "$SG_BIN/runsc"
echo "$RUNSC_VERSION" >"$SG_BIN/runsc.version"
log "runsc: built at $SG_BIN/runsc"
