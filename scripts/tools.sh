#!/usr/bin/env bash
# Installs the pinned generators into .tools/bin (idempotent: a tool whose
# version stamp matches is kept).
source "$(dirname "$0")/lib.sh"
mkdir -p "$TOOLS_BIN"
install() { # name module version
  local stamp="$TOOLS_BIN/.$1.version"
  if [ -x "$TOOLS_BIN/$1" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$3" ]; then return; fi
  log "installing $1 $3"
  GOBIN="$TOOLS_BIN" GOWORK=off go install "$2@$3"
  echo "$3" >"$stamp"
}
install buf github.com/bufbuild/buf/cmd/buf "$BUF_VERSION"
install protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
