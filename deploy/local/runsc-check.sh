#!/usr/bin/env bash
# Prove the runsc runtime: the sandbox image runs python3 under --runtime=runsc.
source "$(dirname "$0")/lib.sh"
out="$(docker run --rm --network none --runtime=runsc sandgrid/sandbox-python:latest \
  python3 -c 'print(1)' 2>&1)" || true
if [ "$out" = "1" ]; then
  log "runsc: works (python3 -c 'print(1)' printed 1 under --runtime=runsc)"
else
  log "runsc: does NOT run here: $out"
  exit 1
fi
