#!/usr/bin/env bash
# Debian's Prometheus and promtool (the CI scrapes a real grid with them:
# tests/integration/test_prometheus_grid.py), and a check of the shipped scrape
# config. The package's own service is not started (no init system here; where
# there is one, policy-rc.d keeps it off during the install): the tests run
# their own Prometheus on a loopback port with a temporary data directory.
source "$(dirname "$0")/lib.sh"
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made_policy=1; fi
  apt_install prometheus
  [ "$made_policy" = 0 ] || rm -f "$policy"
fi
promtool check config "$SG_ROOT/deploy/prometheus/prometheus.yml" >/dev/null \
  || die "promtool: deploy/prometheus/prometheus.yml is not a valid config"
log "prometheus: $(prometheus --version 2>&1 | head -n 1); the shipped config checks"
