#!/usr/bin/env bash
# Docker engine from Debian's docker.io, started by hand (no systemd), with the
# default bridge off (sandboxes have no network; builds use --network host) and
# gVisor's runsc registered as a runtime when it has been built.
source "$(dirname "$0")/lib.sh"

apt_install docker.io iptables ca-certificates

want_daemon_json() {
  python3 - "$SG_BIN/runsc" <<'PY'
import json, os, sys
runsc = sys.argv[1]
cfg = {"bridge": "none", "iptables": False, "ip-masq": False, "log-level": "warn"}
if os.access(runsc, os.X_OK):
    cfg["runtimes"] = {"runsc": {"path": runsc, "runtimeArgs": ["--platform=systrap", "--network=none", "--host-uds=open"]}}
    # Memory snapshots (issue 24): the same runsc, whose create can restore an image.
    cfg["runtimes"]["runsc-restore"] = {"path": os.path.join(os.path.dirname(runsc), "runsc-restore"), "runtimeArgs": ["--platform=systrap", "--network=none", "--host-uds=open"]}
    # Template builds (issue 25): the root's overlay in the sandbox's memory, so a step's
    # writes count against the build's memory quota (runsc's default, root:self, keeps
    # them in a file on the host's disk, bounded by nothing).
    cfg["runtimes"]["runsc-build"] = {"path": runsc, "runtimeArgs": ["--platform=systrap", "--network=none", "--host-uds=open", "--overlay2=root:memory"]}
print(json.dumps(cfg, indent=2, sort_keys=True))
PY
}

mkdir -p /etc/docker
if [ -x "$SG_BIN/runsc" ]; then  # issue 24: the runtime wrapper that restores memory images
  install -m 0755 "$(dirname "$0")/runsc-restore" "$SG_BIN/runsc-restore"
  mkdir -p "$SG_STATE/memory"
fi
new="$(want_daemon_json)"
changed=0
if [ ! -f /etc/docker/daemon.json ] || [ "$(cat /etc/docker/daemon.json)" != "$new" ]; then
  echo "$new" >/etc/docker/daemon.json
  changed=1
fi

if docker info >/dev/null 2>&1; then
  if [ "$changed" = 1 ]; then
    log "docker: configuration changed, restarting dockerd"
    if pid_alive dockerd; then stop_pid dockerd; else pkill -TERM -x dockerd || true; fi
    wait_for "dockerd stop" 30 bash -c '! pgrep -x dockerd'
  else
    log "docker: running"
    exit 0
  fi
fi
log "docker: starting dockerd"
rm -f /var/run/docker.pid
start_bg dockerd dockerd
wait_for "dockerd" 60 docker info
log "docker: running"
