#!/usr/bin/env bash
# Builds the container images baton/etcd, baton/queue, baton/observer and
# baton/worker (tag $BATON_IMAGE_TAG, default dev) FROM scratch, from static
# binaries built here: no image registry is needed. Arguments choose images
# (default: all four), e.g. `scripts/images.sh etcd queue`.
#
# Each image's build context is staged under bin/images/<name>/ (its
# Dockerfile from deploy/docker/, its binaries, an empty data/), so a build
# sends a few megabytes, never the repository. docker-compose.yml builds from
# the same directories.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

TAG=${BATON_IMAGE_TAG:-dev}
images=("$@")
[ ${#images[@]} -gt 0 ] || images=(etcd queue observer worker)

binaries() { # image -> the binaries it ships
  case "$1" in
    etcd) echo "etcd etcdctl" ;;
    queue | observer | worker) echo "baton-$1" ;;
    *) echo "images.sh: unknown image $1 (want etcd, queue, observer or worker)" >&2; return 1 ;;
  esac
}
for img in "${images[@]}"; do binaries "$img" >/dev/null; done

# Our binaries: scripts/build.sh builds every command statically.
for img in "${images[@]}"; do
  if [ "$img" != etcd ]; then "$ROOT/scripts/build.sh"; break; fi
done

# etcd and etcdctl from the official modules at the version deploy/etcd/go.mod
# pins. GOWORK=off: the image gets exactly etcd's own dependency versions (the
# workspace would raise some to ours).
if printf '%s\n' "${images[@]}" | grep -qx etcd; then
  mkdir -p bin
  for pkg in server/v3:etcd etcdctl/v3:etcdctl; do
    log "build bin/${pkg#*:} (go.etcd.io/etcd/${pkg%%:*})"
    (cd deploy/etcd && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' \
      -o "$ROOT/bin/${pkg#*:}" "go.etcd.io/etcd/${pkg%%:*}")
  done
fi

for img in "${images[@]}"; do
  ctx="bin/images/$img"
  rm -rf "$ctx"
  mkdir -p "$ctx/data"
  cp "deploy/docker/$img.Dockerfile" "$ctx/Dockerfile"
  for b in $(binaries "$img"); do
    [ -x "bin/$b" ] || { echo "images.sh: bin/$b was not built" >&2; exit 1; }
    ln "bin/$b" "$ctx/$b" 2>/dev/null || cp "bin/$b" "$ctx/$b"
  done
  log "docker build baton/$img:$TAG"
  # Quiet unless it fails (the legacy builder warns on every build).
  if ! out=$(docker build --tag "baton/$img:$TAG" \
    --label "org.opencontainers.image.source=https://github.com/batonrun/baton" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    "$ctx" 2>&1); then
    printf '%s\n' "$out" >&2
    echo "images.sh: docker build baton/$img:$TAG failed" >&2
    exit 1
  fi
done
docker images --filter "reference=baton/*:$TAG" --format '{{.Repository}}:{{.Tag}}  {{.Size}}' >&2
