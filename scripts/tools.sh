#!/usr/bin/env bash
# Installs the pinned tools into .tools/bin (idempotent: a tool whose
# version stamp matches is kept). With names as arguments, only those
# (scripts/monitoring.sh needs promtool alone).
source "$(dirname "$0")/lib.sh"
mkdir -p "$TOOLS_BIN"
wanted=("$@")
install() { # name module version
  if [ ${#wanted[@]} -gt 0 ] && [[ " ${wanted[*]} " != *" $1 "* ]]; then return; fi
  local stamp="$TOOLS_BIN/.$1.version"
  if [ -x "$TOOLS_BIN/$1" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$3" ]; then return; fi
  log "installing $1 $3"
  GOBIN="$TOOLS_BIN" GOWORK=off go install "$2@$3"
  echo "$3" >"$stamp"
}
install buf github.com/bufbuild/buf/cmd/buf "$BUF_VERSION"
install protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
install staticcheck honnef.co/go/tools/cmd/staticcheck "$STATICCHECK_VERSION"
install promtool github.com/prometheus/prometheus/cmd/promtool "$PROMTOOL_VERSION"
