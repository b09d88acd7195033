#!/usr/bin/env bash
# Images: a local Debian base (debootstrap + docker import, since no registry can
# be reached), the sandbox images, and the grid's own service image. Each is
# rebuilt only when its inputs changed (a content hash kept as an image label).
# The sandbox images are then pushed to the grid's registry (registry.sh, 25.3)
# as $SANDGRID_IMAGES__REGISTRY/sandgrid/<name>:latest, and their digests written
# to $SG_STATE/images/digests.json (docs/operations.md, Images), which nodes
# without a copy pull by.
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
  local old; old="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
  docker build -q --network host --build-arg "BASE=$BASE_IMAGE" --label "sandgrid.inputs=$hash" \
    -t "$tag" -f "$file" "$ctx" >"$SG_LOG/build-${tag//\//_}.log" 2>&1 \
    || { tail -n 30 "$SG_LOG/build-${tag//\//_}.log"; die "docker build $tag failed"; }
  # The build it replaced (~560 MB for the grid's image, rebuilt whenever the sources
  # change) goes, unless a container or another tag still holds it: rm refuses then.
  if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
    docker image rm "$old" >/dev/null 2>&1 || true
  fi
}

DIGESTS="$SG_STATE/images/digests.json"
mkdir -p "$SG_STATE/images"
pushed=()
# push_image TAG: push TAG to the registry unless it holds the same manifest;
# its "TAG REFERENCE@DIGEST" line goes into pushed.
push_image() {
  local tag="$1" remote="$SANDGRID_IMAGES__REGISTRY/$1" repo="${1%:*}" have want
  docker tag "$tag" "$remote"
  want="$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$tag" \
    | grep "^$SANDGRID_IMAGES__REGISTRY/$repo@" | head -n1 | cut -d@ -f2 || true)"
  have="$(curl -sfI -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$SANDGRID_IMAGES__REGISTRY/v2/$repo/manifests/${tag##*:}" \
    | tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: //p' || true)"
  if [ -z "$want" ] || [ "$want" != "$have" ]; then
    log "images: pushing $remote"
    docker push -q "$remote" >"$SG_LOG/push-${tag//\//_}.log" 2>&1 \
      || { tail -n 20 "$SG_LOG/push-${tag//\//_}.log"; die "docker push $remote failed"; }
    want="$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$tag" \
      | grep "^$SANDGRID_IMAGES__REGISTRY/$repo@" | head -n1 | cut -d@ -f2)"
  fi
  pushed+=("$tag $SANDGRID_IMAGES__REGISTRY/$repo@$want")
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
  push_image "sandgrid/$name:latest"
done
# The shipped templates (25.4): [[type]] entries of the types file with a
# template table (node, devbox), rendered as Dockerfiles and built here with
# the host's network (our own steps: Debian's archive), parents first.
SHIPPED="$SG_STATE/images/shipped"
for name in $("$SG_PY" "$SG_ROOT/deploy/local/shipped_templates.py" "$SG_ROOT/deploy/types.toml"); do
  read -r tag ctx < <("$SG_PY" "$SG_ROOT/deploy/local/shipped_templates.py" \
    "$SG_ROOT/deploy/types.toml" "$SHIPPED" "$name") || die "shipped template $name: not rendered"
  build_image "$tag" "$ctx" "$ctx/Dockerfile" "$ctx"
  push_image "$tag"
done
# {"sandgrid/sandbox-python:latest": {"reference": "REGISTRY/REPO@sha256:...", "digest": ...}}
printf '%s\n' "${pushed[@]}" | python3 -c '
import json, sys
out = {}
for line in sys.stdin.read().split("\n"):
    if line.strip():
        tag, ref = line.split()
        out[tag] = {"reference": ref, "digest": ref.rsplit("@", 1)[1]}
print(json.dumps(out, indent=2, sort_keys=True))' >"$DIGESTS.new" && mv "$DIGESTS.new" "$DIGESTS"
log "images: pushed to $SANDGRID_IMAGES__REGISTRY; digests in $DIGESTS"

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
