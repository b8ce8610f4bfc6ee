#!/usr/bin/env bash
# Regenerates the Go code for proto/ from scratch: delete, then generate, so a
# removed message cannot linger in a stale file.
source "$(dirname "$0")/lib.sh"
"$ROOT/scripts/tools.sh"
export PATH="$TOOLS_BIN:$PATH"
cd "$ROOT/proto"
find . -name '*.pb.go' -delete
buf lint
buf generate
log "generated $(find . -name '*.pb.go' | wc -l) files"
