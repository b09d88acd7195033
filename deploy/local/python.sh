#!/usr/bin/env bash
# The project's virtualenv (.venv) with sandgrid and its dev tools installed.
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || apt_install python3
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "python3 >= 3.11 is needed"
python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
command -v tmux >/dev/null || apt_install tmux  # tests/integration/test_shell_tmux.py
[ -x "$SG_PY" ] || { log "python: creating $SG_VENV"; python3 -m venv "$SG_VENV"; }
stamp="$SG_VENV/.sandgrid-installed"
want="$(sha256sum "$SG_ROOT/pyproject.toml" | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "python: installing sandgrid[dev] into $SG_VENV"
  "$SG_PY" -m pip install -q --upgrade pip >/dev/null
  "$SG_PY" -m pip install -q -e "$SG_ROOT[dev]"
  echo "$want" >"$stamp"
else
  log "python: up to date"
fi

# The BFCL benchmark checks the grid's results against the same program on the
# host, so the host needs bfcl-eval too: the sandbox image's own pins, without
# dependencies (its declared ones pull in model clients and torch; the simulated
# multi-turn APIs import only mpmath).
if ! "$SG_PY" -c 'import bfcl_eval, mpmath' 2>/dev/null; then
  log "python: installing bfcl-eval (host reference of sandgrid bench bfcl)"
  "$SG_PY" -m pip install -q --no-deps -r "$SG_ROOT/images/sandbox-bfcl/requirements.txt"
fi
