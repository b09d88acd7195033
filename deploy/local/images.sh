#!/usr/bin/env bash
# Images: a local Debian base (debootstrap + docker import, since no registry can
# be reached), the sandbox images, and the grid's own service image. Each is
# rebuilt only when its inputs changed (a content hash kept as an image label).
source "$(dirname "$0")/lib.sh"
BASE_IMAGE="${SANDGRID_BASE_IMAGE:-sandgrid/debian-base:bookworm}"
MIRROR="${SANDGRID_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

ensure_base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then return 0; fi
  apt_install debootstrap
  local root="$SG_STATE/rootfs-bookworm"
  if [ ! -x "$root/bin/sh" ] || [ ! -f "$root/.complete" ]; then
    log "images: debootstrap bookworm into $root (a few minutes)"
    rm -rf "$root"
    debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$SG_LOG/debootstrap.log" 2>&1 \
      || die "debootstrap failed (see $SG_LOG/debootstrap.log)"
    touch "$root/.complete"
  fi
  log "images: docker import $BASE_IMAGE"
  tar -C "$root" --exclude=./.complete -c . | docker import - "$BASE_IMAGE" >/dev/null
}

# build_image TAG CONTEXT DOCKERFILE HASH_INPUT...: build unless the hash label matches.
build_image() {
  local tag="$1" ctx="$2" file="$3"; shift 3
  local base_id hash have
  base_id="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
  # Paths relative to the checkout, so that another clone of the same tree matches.
  hash="$( (echo "$base_id"; find "$@" -type f -print0 | sort -z | xargs -0 sha256sum \
    | sed "s#$SG_ROOT/##") | sha256sum | cut -c1-16)"
  have="$(docker image inspect -f '{{index .Config.Labels "sandgrid.inputs"}}' "$tag" 2>/dev/null || true)"
  if [ "$have" = "$hash" ]; then log "images: $tag up to date"; return 0; fi
  log "images: building $tag"
  docker build -q --network host --build-arg "BASE=$BASE_IMAGE" --label "sandgrid.inputs=$hash" \
    -t "$tag" -f "$file" "$ctx" >"$SG_LOG/build-${tag//\//_}.log" 2>&1 \
    || { tail -n 30 "$SG_LOG/build-${tag//\//_}.log"; die "docker build $tag failed"; }
}

ensure_base
for dir in "$SG_ROOT"/images/sandbox-*/; do
  name="$(basename "$dir")"
  # A sandbox image may fetch its inputs on the host first (wheels: the host
  # trusts its CA bundle and reaches PyPI; the build then needs no index).
  if [ -x "$dir/prepare.sh" ]; then
    SG_PY="$SG_PY" "$dir/prepare.sh" >"$SG_LOG/prepare-$name.log" 2>&1 \
      || { tail -n 20 "$SG_LOG/prepare-$name.log"; die "$dir/prepare.sh failed"; }
  fi
  build_image "sandgrid/$name:latest" "$dir" "$dir/Dockerfile" "$dir"
done

# The grid's own image: wheels built on the host (PyPI reachable here), copied in.
if [ "${SANDGRID_SKIP_GRID_IMAGE:-0}" != 1 ]; then
  wheels="$SG_ROOT/.build/wheels"
  src_hash="$(cd "$SG_ROOT" && find pyproject.toml deploy/types.toml sandgrid scheduler worker -type f -name '*.py' -o -name 'pyproject.toml' -o -name '*.lua' | sort | xargs sha256sum | sha256sum | cut -c1-16)"
  if [ "$(cat "$wheels/.hash" 2>/dev/null)" != "$src_hash" ]; then
    log "images: building wheels for the grid image"
    rm -rf "$wheels"; mkdir -p "$wheels"
    "$SG_PY" -m pip wheel -q -w "$wheels" "$SG_ROOT[server,worker]" >"$SG_LOG/wheels.log" 2>&1 \
      || { tail -n 20 "$SG_LOG/wheels.log"; die "pip wheel failed"; }
    echo "$src_hash" >"$wheels/.hash"
  fi
  build_image "sandgrid/grid:latest" "$SG_ROOT" "$SG_ROOT/images/grid/Dockerfile" \
    "$SG_ROOT/images/grid" "$wheels"
fi
log "images: ready"
