# Shared settings for the scripts: pinned tool versions and the module list.
# Sourced, not run.
set -euo pipefail

# Every module is built, vetted and tested on its own (GOWORK=off): merged
# into one workspace graph, etcd's old go-grpc-middleware v1 drags in a 2020
# google.golang.org/genproto that makes googleapis/rpc/status ambiguous for
# every module, while each module's own pruned graph is clean. go.work stays
# for editors; the replace lines in each go.mod wire the siblings.
export GOWORK=off

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_BIN="$ROOT/.tools/bin"

# Pinned code generators and linters, installed with `go install` from the Go
# module proxy (no download sites are reachable on our machines).
BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.0
STATICCHECK_VERSION=v0.8.2
# promtool checks and unit-tests deploy/monitoring's rules. Prometheus tags
# its Go module v0.3MM.P for its release v3.MM.P: this is Prometheus 3.16.0.
# Its first build takes about ten minutes on two cores; later ones are kept.
PROMTOOL_VERSION=v0.316.0

# Every Go module of the workspace, in dependency order.
modules() {
  (cd "$ROOT" && find . -name go.mod -not -path './.tools/*' -not -path './data/*' -printf '%h\n' | sed 's|^\./||' | sort)
}

log() { printf '==> %s\n' "$*" >&2; }

# compose runs `docker compose` (v2) if it is installed, else Debian's
# docker-compose (v1), which builds with BuildKit (whose cache mounts the
# Dockerfile uses) only when told to.
compose() {
  if docker compose version >/dev/null 2>&1; then
    docker compose "$@"
  else
    COMPOSE_DOCKER_CLI_BUILD=1 DOCKER_BUILDKIT=1 docker-compose "$@"
  fi
}

# compose_name is how to spell the compose command here, for messages.
compose_name() {
  if docker compose version >/dev/null 2>&1; then echo "docker compose"; else echo "docker-compose"; fi
}

# go_image is the build stage's Go image: $BATON_GO_IMAGE, or the default the
# Dockerfile pins.
go_image() {
  if [ -n "${BATON_GO_IMAGE:-}" ]; then echo "$BATON_GO_IMAGE"; return; fi
  sed -n 's/^ARG BATON_GO_IMAGE=//p' "$ROOT/deploy/docker/Dockerfile"
}

# Pinned buildx, for a docker CLI that has none (BuildKit needs it).
BUILDX_VERSION=v0.38.2
