#!/usr/bin/env bash
# Builds the container images baton/etcd, baton/queue, baton/observer,
# baton/worker and baton/batonctl (tag $BATON_IMAGE_TAG, default dev) from deploy/docker/Dockerfile,
# the same targets docker-compose.yml builds, without starting anything: for
# loading them into a cluster (deploy/kubernetes). Arguments choose images
# (default: all five), e.g. `scripts/images.sh etcd queue`.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
TAG=${BATON_IMAGE_TAG:-dev}
images=("$@")
[ ${#images[@]} -gt 0 ] || images=(etcd queue observer worker batonctl)
for img in "${images[@]}"; do
  case "$img" in
    etcd | queue | observer | worker | batonctl) ;;
    *) echo "images.sh: unknown image $img (want etcd, queue, observer, worker or batonctl)" >&2; exit 2 ;;
  esac
done
"$ROOT/scripts/buildx.sh"
"$ROOT/scripts/base-image.sh"
for img in "${images[@]}"; do
  log "docker build baton/$img:$TAG"
  DOCKER_BUILDKIT=1 docker build --quiet --file deploy/docker/Dockerfile --target "$img" \
    --build-arg "BATON_GO_IMAGE=$(go_image)" --tag "baton/$img:$TAG" \
    --label "org.opencontainers.image.source=https://github.com/batonrun/baton" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    . >/dev/null
done
docker images --filter "reference=baton/*:$TAG" --format '{{.Repository}}:{{.Tag}}  {{.Size}}' >&2
