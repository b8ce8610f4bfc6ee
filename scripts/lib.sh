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

# Every Go module of the workspace, in dependency order.
modules() {
  (cd "$ROOT" && find . -name go.mod -not -path './.tools/*' -not -path './data/*' -printf '%h\n' | sed 's|^\./||' | sort)
}

log() { printf '==> %s\n' "$*" >&2; }
