#!/usr/bin/env bash
# Makes sure `docker build` can use BuildKit: the docker CLI needs its buildx
# plugin for that. Where it is missing (Debian's docker.io has none), this
# builds buildx $BUILDX_VERSION from the Go module proxy and installs it as the
# user's CLI plugin (${DOCKER_CONFIG:-~/.docker}/cli-plugins/docker-buildx),
# as `docker buildx install` would. Idempotent.
source "$(dirname "$0")/lib.sh"
if docker buildx version >/dev/null 2>&1; then exit 0; fi
plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
stamp="$plugins/.docker-buildx.version"
if [ -x "$plugins/docker-buildx" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$BUILDX_VERSION" ]; then
  echo "buildx.sh: $plugins/docker-buildx is installed but 'docker buildx version' fails" >&2
  exit 1
fi
log "installing docker buildx $BUILDX_VERSION into $plugins (built from the Go module proxy; a cold build takes about 3 minutes)"
mkdir -p "$TOOLS_BIN" "$plugins"
GOBIN="$TOOLS_BIN" CGO_ENABLED=0 go install -ldflags "-X github.com/docker/buildx/version.Version=$BUILDX_VERSION" "github.com/docker/buildx/cmd/buildx@$BUILDX_VERSION"
cp "$TOOLS_BIN/buildx" "$plugins/docker-buildx"
echo "$BUILDX_VERSION" >"$stamp"
docker buildx version >/dev/null
